"""`sink.delta_log: true`: a Delta Lake transaction log beside the Parquet shards, so Spark,
polars (`pl.read_delta`) and delta-rs read the dataset and each of its versions natively.

The log is written with the `deltalake` package (delta-rs), never by hand: one Delta commit per
gpuetl dataset version (gpuetl version N is Delta version N-1), holding an add action for each
Parquet shard that version brought, the same files the manifest lists. It is written inside the
commit protocol (sinks/commit.py), after the shards are in place and the manifest written, and
before `_SUCCESS`; the commit journal names it, so a commit killed on either side of it is
finished by the next run or `gpuetl verify --repair`, and the Delta commit is made once: a log
that already holds version N-1 is not written again. The log's files are listed in the manifest
(`delta_log.files`), so gpuetl knows them as its own."""

from __future__ import annotations

import json
from pathlib import Path

import re

from ..errors import OutputError, SpecError

DELTA_LOG = "_delta_log"
DELTA_ENTRY = re.compile(re.escape(DELTA_LOG) + r"/[0-9]{20}\.json")      # a Delta commit's log entry
INSTALL_HINT = "pip install 'gpuetl[delta]' (the deltalake package), or set sink.delta_log: false"


def log_file(table_version: int) -> str:
    """The Delta log entry of a table version, relative to the dataset folder."""
    return f"{DELTA_LOG}/{table_version:020d}.json"


def check_delta_sink(sink) -> None:
    """At validate time: the deltalake package is importable and the sink a local folder or s3://."""
    from ..storage import is_remote, scheme

    if is_remote(sink.path) and scheme(sink.path) not in ("s3", "s3a"):
        raise ValueError("delta_log: true is written to local dataset folders and s3:// only")
    try:
        import deltalake  # noqa: F401
    except ImportError:
        raise ValueError(f"delta_log: true needs the deltalake package, which is not installed ({INSTALL_HINT})") \
            from None


def check_schema(schema: dict) -> None:
    """Before any data is read: the output schema has a Delta type for every column."""
    import deltalake

    from ..types import arrow_schema

    try:
        deltalake.Schema.from_arrow(arrow_schema(schema))
    except Exception as err:          # delta-rs says which type it cannot take
        raise SpecError(f"sink.delta_log: the output schema has no Delta Lake equivalent ({err})",
                        hint="cast the column (columns: …), or set sink.delta_log: false") from None


def log_entry(manifest: dict, new_shards: list[dict]) -> dict:
    """What the manifest records of the Delta commit its version makes: the table version, the
    shards it adds and every log file of the table up to it (for the inventory and verify)."""
    version = manifest.get("dataset_version") or 1
    table_version = version - 1
    return {"table_version": table_version, "adds": [s["path"] for s in new_shards],
            "files": [{"path": log_file(k)} for k in range(table_version + 1)]}


def delta_options(url: str, storage_options: dict | None) -> dict:
    """delta-rs's options for an s3:// dataset, from the sink's storage_options (s3fs's names) and
    the AWS environment as botocore reads it; commits are conditional PUTs (If-None-Match), so two
    writers never both make one Delta version."""
    import os

    options = dict(storage_options or {})
    client = dict(options.get("client_kwargs") or {})
    found = {"AWS_ACCESS_KEY_ID": options.get("key"), "AWS_SECRET_ACCESS_KEY": options.get("secret"),
             "AWS_SESSION_TOKEN": options.get("token"),
             "AWS_ENDPOINT_URL": client.get("endpoint_url") or options.get("endpoint_url")
             or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"),
             "AWS_REGION": client.get("region_name") or os.environ.get("AWS_REGION")
             or os.environ.get("AWS_DEFAULT_REGION")}
    out = {k: str(v) for k, v in found.items() if v}
    if options.get("anon"):
        out["AWS_SKIP_SIGNATURE"] = "true"
    if out.get("AWS_ENDPOINT_URL", "").startswith("http://"):
        out["AWS_ALLOW_HTTP"] = "true"
    out["conditional_put"] = "etag"
    return out


def commit_version(out, manifest: dict, exists=None, storage_options: dict | None = None) -> None:
    """Make the manifest's Delta commit in out/_delta_log (after the manifest, before _SUCCESS):
    nothing when the log holds that version already (a commit finished again from its journal).
    out: the dataset folder, or its s3:// URL (exists(rel): whether that object is there)."""
    entry = manifest.get("delta_log")
    if not isinstance(entry, dict):
        return
    remote = isinstance(out, str)
    if exists is None:
        exists = lambda rel: (Path(out) / rel).is_file()  # noqa: E731
    table_version = entry["table_version"]
    if exists(log_file(table_version)):
        return
    if table_version and not exists(log_file(table_version - 1)):
        raise OutputError(f"sink.path: {out / DELTA_LOG} lacks Delta version {table_version - 1}; the Delta log "
                          f"cannot take version {table_version}", hint="rewrite the dataset with sink.mode: overwrite")
    try:
        from deltalake import DeltaTable, Schema
        from deltalake.transaction import (AddAction, CommitProperties, PostCommitHookProperties,
                                           create_table_with_add_actions)
    except ImportError:
        raise OutputError(f"sink.delta_log: the deltalake package is not installed; the commit of {out} waits for "
                          "its Delta log", hint=f"{INSTALL_HINT}; then `gpuetl verify --repair {out}`") from None
    from ..types import arrow_schema

    by_path = {s["path"]: s for s in manifest["shards"]}
    created = _millis(manifest)
    adds = [AddAction(rel, by_path[rel]["bytes"], {}, created, True, json.dumps({"numRecords": by_path[rel]["rows"]}))
            for rel in entry["adds"]]
    schema = Schema.from_arrow(arrow_schema({c["name"]: c["type"] for c in manifest["schema"]}))
    # no checkpoints and no log clean-up: the log holds exactly the files the manifest lists
    hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
    props = CommitProperties(custom_metadata={"gpuetl.dataset_version": str(table_version + 1),
                                              "gpuetl.pipeline": str(manifest.get("name"))})
    options = delta_options(out, storage_options) if remote else None
    if table_version == 0:
        create_table_with_add_actions(str(out), schema, adds, mode="error", name=manifest.get("name"),
                                      storage_options=options, commit_properties=props,
                                      post_commithook_properties=hooks)
    else:
        DeltaTable(str(out), storage_options=options).create_write_transaction(
            adds, mode="append", schema=schema, commit_properties=props, post_commithook_properties=hooks)
    if not exists(log_file(table_version)):
        raise OutputError(f"sink.path: the Delta commit of {out} did not make version {table_version} (another "
                          "writer committed to its log?)", hint="rewrite the dataset with sink.mode: overwrite")


def _millis(manifest: dict) -> int:
    import calendar
    import time

    stamp = (manifest.get("run") or {}).get("created_at")
    try:
        return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) * 1000
    except (TypeError, ValueError):
        return int(time.time() * 1000)
