"""Exact dedupe removes every duplicate and nothing else, even when unequal rows share hashes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gpuetl.hashing
from gpuetl.backends.cpu import CpuBackend
from gpuetl.runtime.executor import Executor
from textdata import run_jsonl, write_jsonl

real_hash = gpuetl.hashing.hash_columns
real_row_hash = CpuBackend.row_hash

ROW = st.fixed_dictionaries({
    "k": st.sampled_from(["a", "b", "", "ab", None]),
    "n": st.one_of(st.none(), st.integers(-2, 2)),
    "v": st.sampled_from(["x", "y"]),
})


@pytest.fixture(params=[1, 0x4000_0000_0000_0001])
def colliding_hashes(monkeypatch, request):
    """Every row hash keeps 2 bits: unequal rows share hashes all the time. Spread to the top
    bits too (the second form), the four hashes fall in different slots of advance()'s bitmap,
    so a hash that was never kept is skipped there while its equals are searched."""
    spread = np.uint64(request.param)
    monkeypatch.setattr(gpuetl.hashing, "hash_columns",
                        lambda backend, columns, seed=0: real_hash(backend, columns, seed) & backend.xp.uint64(3))
    monkeypatch.setattr(CpuBackend, "row_hash",
                        lambda self, columns: (real_row_hash(self, columns) & np.uint64(3)) * spread)


@pytest.fixture(params=["in order", "all at once"])
def strategy(request, monkeypatch):
    """In this process the step is settled partition by partition (resolve_in_order); on other
    clusters all at once (resolve_in_place): both must give the same rows."""
    if request.param == "all at once":
        monkeypatch.setattr(Executor, "in_process", property(lambda self: False))
    return request.param


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(ROW, max_size=25), min_size=1, max_size=3),
       on=st.sampled_from([None, ["k"], ["k", "n"]]))
def test_dedupe_removes_exactly_the_duplicates(tmp_path_factory, colliding_hashes, strategy, files, on):
    tmp_path = tmp_path_factory.mktemp("d")
    for i, rows in enumerate(files):
        write_jsonl(tmp_path / "in" / f"f{i}.jsonl", rows)
    params = {} if on is None else {"on": on}
    result, out = run_jsonl(tmp_path, [{"dedupe": params}], {"k": "string", "n": "int64", "v": "string"},
                            blocksize="256B")
    keys = on or ["k", "n", "v"]
    first = {}
    for i, rows in enumerate(files):
        for row in rows:
            first.setdefault(tuple(row[c] for c in keys), (f"in/f{i}.jsonl", row))
    assert len(out) == len(first)
    assert result.counts["deduplicated"] == sum(map(len, files)) - len(first)
    kept = {tuple(r[c] for c in keys): (r["_file"], {c: r[c] for c in ("k", "n", "v")}) for r in out}
    assert kept == first   # each key once, and the copy kept is the first by file and offset


@pytest.mark.parametrize("with_polars", [True, False])
def test_row_hash_is_equal_for_equal_values(monkeypatch, with_polars):
    """Candidates are found by row_hash: values pandas holds equal must hash equal, with polars'
    row hash or without it (the shared hash with canonical floats, as the GPU's)."""
    import pyarrow as pa

    from gpuetl.backends import cpu

    if not with_polars:
        monkeypatch.setattr(cpu, "polars_available", lambda: False)
    backend = CpuBackend()
    floats = backend.series(pa.array([0.0, -0.0, float("nan"), float("nan"), 1.5, None]), "float64")
    texts = backend.series(pa.array(["a", "a", "b", "b", None, None]), "string")
    h = backend.row_hash([floats, texts])
    assert h[0] == h[1] and h[2] == h[3] and len(set(h.tolist())) == 4
    assert h.dtype == np.uint64


@settings(max_examples=50, deadline=None)
@given(kept=st.lists(st.integers(0, 2**64 - 1), max_size=200), seed=st.integers(0, 1000))
def test_seen_bits_never_miss_a_kept_hash(kept, seed):
    """advance() searches the runs only for hashes whose bit is set: every kept hash must find
    its bit set; a random hash never kept mostly finds it clear."""
    from gpuetl.steps.dedupe import _FILTER_BITS, _set_bits, _test_bits

    bits = np.zeros(1 << (_FILTER_BITS - 3), dtype=np.uint8)
    _set_bits(bits, np.array(kept, dtype=np.uint64))
    assert _test_bits(bits, np.array(kept, dtype=np.uint64)).all()
    fresh = np.random.default_rng(seed).integers(0, 2**63, 1000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    fresh = fresh[~np.isin(fresh, np.array(kept, dtype=np.uint64))]
    assert _test_bits(bits, fresh).sum() <= 10


@settings(max_examples=50, deadline=None)
@given(runs=st.lists(st.lists(st.integers(0, 6), max_size=30).map(sorted), min_size=1, max_size=8))
def test_seen_runs_stay_sorted_and_keep_older_rows_first(runs):
    """advance() keeps kept rows in sorted runs, merged as they grow: a merged run is sorted, an
    older run's rows come before a newer run's among equal hashes, and about log2 of the
    partitions' runs remain."""
    from gpuetl.steps.dedupe import _merge_runs

    merged, rows, expected = (), 0, []
    for hashes in (r for r in runs if r):                 # advance() adds no empty run
        run = (np.array(hashes, dtype=np.uint64), np.arange(rows, rows + len(hashes), dtype=np.int64))
        expected += list(zip(hashes, run[1].tolist()))
        rows += len(hashes)
        merged = _merge_runs([*merged, run])
    got = [pair for h, r in merged for pair in zip(h.tolist(), r.tolist())]
    assert sorted(got) == sorted(expected, key=lambda p: (p[0], p[1]))
    for h, r in merged:
        assert list(zip(h.tolist(), r.tolist())) == sorted(zip(h.tolist(), r.tolist()))
    assert len(merged) <= max(1, len(runs)).bit_length() + 1


@pytest.mark.parametrize("shard", [{}, {"count": 2, "shuffle": True}], ids=["streamed", "shuffled"])
def test_key_frames_set_aside_on_disk_give_the_same_rows(tmp_path, colliding_hashes, monkeypatch, shard):
    """Past KEY_FRAMES_IN_MEMORY a settled partition's key columns wait in a file of the run's
    (steps/dedupe.py: KeyFrames); a later candidate is compared with the rows read back from it.
    With no memory at all for them, every earlier partition is read back, and the rows are the
    same as with all of them in memory."""
    from gpuetl.steps import dedupe as dedupe_module

    rows = [{"k": k, "n": n, "v": v} for k in ("a", "b", "ab") for n in range(4) for v in ("x", "y")]
    for i in range(3):          # each file repeats the rows, so partitions repeat earlier ones
        write_jsonl(tmp_path / "in" / f"f{i}.jsonl", rows[i:] + rows[:i])
    steps = [{"dedupe": {}}]
    columns = {"k": "string", "n": "int64", "v": "string"}
    in_memory, out_memory = run_jsonl(tmp_path, steps, columns, blocksize="256B", shard=shard)

    read_back = []
    real_get = dedupe_module.KeyFrames.get

    def get(self, partition, positions, backend):
        read_back.append(partition in self.files)
        return real_get(self, partition, positions, backend)

    monkeypatch.setattr(dedupe_module, "KEY_FRAMES_IN_MEMORY", 0)
    monkeypatch.setattr(dedupe_module.KeyFrames, "get", get)
    on_disk, out_disk = run_jsonl(tmp_path, steps, columns, blocksize="256B", shard=shard)
    assert read_back and all(read_back)
    assert on_disk.counts == in_memory.counts and on_disk.counts["deduplicated"] == 2 * len(rows)
    assert out_disk == out_memory and len(out_disk) == len(rows)
    assert [s["sha256"] for s in on_disk.shards] == [s["sha256"] for s in in_memory.shards]
    assert not (tmp_path / "out" / "_tmp").exists() or not any((tmp_path / "out" / "_tmp").rglob("*.arrow"))


def test_merged_runs_stay_under_the_cap_and_the_state_is_16_bytes_a_distinct_key(monkeypatch):
    """advance() keeps 16 bytes (hash, row) a kept row, i.e. a distinct key, in its runs; no
    merge makes a run past MAX_MERGED_ROWS (a merge holds its run beside the two it joins)."""
    import pandas as pd

    from gpuetl.backends.base import FILE_INDEX, OFFSET, STATUS, STATUS_LIVE
    from gpuetl.steps import dedupe as dedupe_module
    from gpuetl.steps.dedupe import Dedupe

    monkeypatch.setattr(dedupe_module, "MAX_MERGED_ROWS", 1500)
    backend = CpuBackend()
    step = Dedupe.from_raw({"on": ["k"]}).bind({"k": "string"})
    seen, everything, dropped = step.start(backend, None), [], 0
    for p in range(12):
        keys = [f"k{(p * 300 + i) % 2000}" for i in range(400)]     # repeats within and across partitions
        everything += keys
        df = pd.DataFrame({"k": backend.series(keys, "string"),
                           FILE_INDEX: backend.series(np.zeros(400, dtype=np.int32), "int32"),
                           OFFSET: backend.series(np.arange(p * 400, (p + 1) * 400), "int64"),
                           STATUS: backend.series(np.full(400, STATUS_LIVE, dtype=np.int8), "int8")})
        seen, decided = step.advance(seen, df, step.row_keys(df, backend), p, backend)
        dropped += len(decided[p])
        assert sum(len(h) for h, _ in seen.runs) == len(set(everything))
        assert sum(h.nbytes + r.nbytes for h, r in seen.runs) == 16 * len(set(everything))
    assert dropped == len(everything) - len(set(everything)) and len(set(everything)) == 2000
    assert len(seen.runs) > 1 and max(len(h) for h, _ in seen.runs) <= 1500
