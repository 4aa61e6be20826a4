"""A run's phases, one module each, in the order runtime/run.py calls them:

    folder      the sink's folder, checked before any data is read      plan → OutputFolder
    resume      the run's temporary folder: a new one or an interrupted
                run's, and the partitions that run finished              folder → run folder, finished maps
    mapping     the map tasks: read, steps, spill (or stream)            finished maps → Mapped
    accounting  rows_in = rows_out + filtered + deduplicated + quarantined,
                and the error checks                                     Mapped → Accounts
    sharding    the shard and quarantine tasks, on the workers           Mapped → Written
    manifest    the manifest and the RunResult                           Mapped, Accounts, Written → RunResult

Every phase after the folder takes the run's RunContext (context.py, which also holds what the
phases hand each other) beside its input, and imports only the phases before it, context.py and
cuts.py (where the shards are cut)."""
