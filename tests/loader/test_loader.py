"""gpuetl.Loader on a dataset made by a gpuetl run: order, ranks, workers, resume, outputs."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.errors import SpecError
from gpuetl.loader import order as order_mod

NAMES = ["_file", "_offset"]


def split_rows(root, split="train"):
    """The split's row names (`_file:_offset`) in manifest order, read with pyarrow alone."""
    manifest = json.loads((root / "_manifest.json").read_bytes())
    names = []
    for shard in manifest["shards"]:
        if shard["split"] == split:
            t = pq.read_table(root / shard["path"], columns=NAMES)
            names += [f"{f}:{o}" for f, o in zip(t.column("_file").to_pylist(), t.column("_offset").to_pylist())]
    return names


def names(batch) -> list[str]:
    return [f"{f}:{o}" for f, o in zip(batch["_file"].to_pylist(), batch["_offset"].tolist())]


def epoch_batches(root, **kw) -> list[list[str]]:
    kw.setdefault("columns", NAMES)
    kw.setdefault("batch_size", 64)
    return [names(b) for b in gpuetl.Loader(root, **kw)]


def flat(batches):
    return [n for b in batches for n in b]


def test_same_seed_and_epoch_give_the_same_order_another_epoch_or_seed_another(loader_dataset):
    first = epoch_batches(loader_dataset, seed=3, epoch=1)
    assert first == epoch_batches(loader_dataset, seed=3, epoch=1)
    assert first != epoch_batches(loader_dataset, seed=3, epoch=2)
    assert first != epoch_batches(loader_dataset, seed=4, epoch=1)
    rows = split_rows(loader_dataset)
    assert len(set(flat(first))) == len(flat(first))           # no row twice
    assert set(flat(first)) <= set(rows) and first != [rows[i:i + 64] for i in range(0, len(flat(first)), 64)]


def test_iterating_again_runs_the_next_epoch(loader_dataset):
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=5)
    one = [names(b) for b in loader]
    two = [names(b) for b in loader]
    assert loader.epoch == 2
    assert one == epoch_batches(loader_dataset, seed=5, epoch=0)
    assert two == epoch_batches(loader_dataset, seed=5, epoch=1)


def test_shuffle_false_gives_manifest_order(loader_dataset):
    rows = split_rows(loader_dataset)
    got = flat(epoch_batches(loader_dataset, shuffle=False, batch_size=100, drop_last=True))
    assert got == rows[:len(rows) // 100 * 100]


def test_rows_are_shuffled_within_a_bounded_buffer(loader_dataset):
    """With shuffle_buffer=S, positions [wS, (w+1)S) hold exactly the rows of stream window w: the
    row groups in their shuffled order, laid end to end (docs/consuming.md)."""
    S = 300
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=50, shuffle_buffer=S, seed=9, drop_last=True)
    order = loader.order()
    got = flat([names(b) for b in loader])
    group_rows = {}
    for u, (s, g) in enumerate(loader.units):
        t = pq.ParquetFile(loader_dataset / loader.data.shards[s].path).read_row_group(g, columns=NAMES)
        group_rows[u] = [f"{f}:{o}" for f, o in zip(t.column("_file").to_pylist(), t.column("_offset").to_pylist())]
    stream = [n for u in order.units for n in group_rows[int(u)]]
    assert stream != split_rows(loader_dataset)                 # row groups were shuffled
    for w in range(len(got) // S):
        window = got[w * S:(w + 1) * S]
        assert sorted(window) == sorted(stream[w * S:(w + 1) * S]) and window != stream[w * S:(w + 1) * S]


@pytest.mark.parametrize("prefetch", [0, 3])
def test_the_same_batches_with_0_1_and_2_reader_workers(loader_dataset, prefetch):
    runs = [epoch_batches(loader_dataset, seed=2, num_workers=w, prefetch=prefetch, shuffle_buffer=500)
            for w in (0, 1, 2)]
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) > 10


@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_take_disjoint_slices_with_equal_batch_counts(loader_dataset, drop_last):
    rows = split_rows(loader_dataset)
    world, B = 3, 64
    per_rank = [epoch_batches(loader_dataset, seed=1, rank=r, world_size=world, batch_size=B, drop_last=drop_last)
                for r in range(world)]
    counts = {len(b) for b in per_rank}
    assert len(counts) == 1 and all(len(batch) == B for b in per_rank for batch in b)
    global_order = flat(epoch_batches(loader_dataset, seed=1, batch_size=B, drop_last=False))[:len(rows)]
    remainder = len(rows) % (world * B)
    assert remainder                                              # the case is not trivial
    seen = [n for p in per_rank for n in flat(p)]
    if drop_last:
        assert len(seen) == len(set(seen)) == len(rows) - remainder
        assert set(seen) == set(global_order[:len(rows) - remainder])   # the remainder is the order's tail
    else:
        assert set(seen) == set(rows)
        extra = len(seen) - len(rows)
        assert 0 < extra < world * B
        # the padding repeats the global order from its start
        interleaved = [n for step in zip(*per_rank) for n in flat(step)]
        assert interleaved == global_order + global_order[:extra]


@pytest.mark.parametrize("k, workers", [(1, 0), (7, 2), (20, 1)])
def test_resume_after_batch_k_yields_what_an_uninterrupted_epoch_does(loader_dataset, k, workers):
    whole = epoch_batches(loader_dataset, seed=7, epoch=3, num_workers=1, shuffle_buffer=400)
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=7, epoch=3, num_workers=2,
                           shuffle_buffer=400)
    it = iter(loader)
    head = [names(next(it)) for _ in range(k)]
    state = json.loads(json.dumps(loader.state_dict()))          # a state survives a checkpoint file
    it.close()
    resumed = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=7, num_workers=workers,
                            shuffle_buffer=400, prefetch=1)
    resumed.load_state_dict(state)
    assert head == whole[:k]
    assert [names(b) for b in resumed] == whole[k:]
    assert resumed.epoch == 4                                    # and it goes on to the next epoch


def test_resume_with_another_world_size_continues_the_global_order(loader_dataset):
    B = 32
    global_order = flat(epoch_batches(loader_dataset, seed=11, batch_size=B, drop_last=True))
    loaders = [gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=B, seed=11, rank=r, world_size=2)
               for r in range(2)]
    its = [iter(x) for x in loaders]
    before = [names(next(it)) for _ in range(5) for it in its]   # 5 steps on 2 ranks
    states = [x.state_dict() for x in loaders]
    assert states[0] == {**states[1]}                             # every rank holds the same position
    after = []
    resumed = [gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=B, seed=11, rank=r, world_size=3)
               for r in range(3)]
    for x in resumed:
        x.load_state_dict(states[0])
    per_rank = [[names(b) for b in x] for x in resumed]
    assert len({len(p) for p in per_rank}) == 1
    after = [n for step in zip(*per_rank) for n in flat(step)]
    consumed = 5 * 2 * B
    assert flat(before) == global_order[:consumed]
    left = len(split_rows(loader_dataset)) - consumed
    assert after == global_order[consumed:consumed + left // (3 * B) * 3 * B]


def test_a_state_from_another_order_is_refused(loader_dataset):
    state = gpuetl.Loader(loader_dataset, columns=NAMES, seed=1).state_dict()
    with pytest.raises(SpecError, match="seed"):
        gpuetl.Loader(loader_dataset, columns=NAMES, seed=2).load_state_dict(state)


def test_numpy_output_keeps_declared_dtypes_and_strings_come_as_arrow(loader_dataset):
    batch = next(iter(gpuetl.Loader(loader_dataset, columns=["status", "time", "_offset", "ip"], batch_size=16)))
    assert batch["status"].dtype == np.int16 and batch["_offset"].dtype == np.int64
    assert batch["time"].dtype == np.dtype("datetime64[us]")
    assert isinstance(batch["ip"], pa.StringArray) and len(batch["ip"]) == 16
    arrow = next(iter(gpuetl.Loader(loader_dataset, columns=["status", "ip"], batch_size=16, output="arrow")))
    assert isinstance(arrow, pa.RecordBatch) and arrow.schema.names == ["status", "ip"] and arrow.num_rows == 16
    assert arrow.column("status").to_pylist() == batch["status"].tolist()


def test_wrong_pairs_and_tensor_outputs_of_strings_are_refused(loader_dataset):
    with pytest.raises(SpecError, match="leave out"):
        gpuetl.Loader(loader_dataset, columns=["status", "ip"], output="torch")
    with pytest.raises(SpecError, match="device='cpu' gives output"):
        gpuetl.Loader(loader_dataset, output="cupy")
    with pytest.raises(SpecError, match="no column 'nope'"):
        gpuetl.Loader(loader_dataset, columns=["nope"])
    with pytest.raises(SpecError, match="no split 'dev'"):
        gpuetl.Loader(loader_dataset, split="dev")


def test_cuda_without_a_gpu_backend_is_a_clear_error(loader_dataset):
    from gpuetl.backends.gpu_detect import gpu_count, rapids_available

    if rapids_available() and gpu_count():
        pytest.skip("a GPU backend is here")
    with pytest.raises(SpecError, match="device='cuda' needs an NVIDIA GPU"):
        gpuetl.Loader(loader_dataset, device="cuda", output="torch")


def test_stats_count_what_was_read_and_waited(loader_dataset):
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, drop_last=False)
    n = sum(1 for _ in loader)
    s = loader.stats()
    manifest = json.loads((loader_dataset / "_manifest.json").read_bytes())
    rows = sum(x["rows"] for x in manifest["shards"] if x["split"] == "train")
    assert s["batches"] == n == -(-rows // 64)
    assert s["rows_read"] >= rows and s["row_groups_read"] >= len(loader.units)
    assert 0 < s["bytes_read"] and s["read_s"] > 0 and s["wait_s"] >= s["first_wait_s"] > 0


def test_prefetch_stays_within_its_bound(loader_dataset, monkeypatch):
    made = []
    original = gpuetl.Loader._convert

    def counting(self, table, pool=None):
        made.append(1)
        return original(self, table, pool)

    monkeypatch.setattr(gpuetl.Loader, "_convert", counting)
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=16, prefetch=3)
    it = iter(loader)
    next(it)
    time.sleep(0.5)
    assert 1 + 3 <= len(made) <= 1 + 3 + 1          # the queue's 3, and one held by the reader thread
    it.close()


def test_import_gpuetl_stays_light():
    import subprocess
    import sys

    code = "import sys, gpuetl; gpuetl.Loader; print('pyarrow.parquet' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "False"]


def test_a_state_taken_after_the_last_batch_resumes_at_the_next_epoch(loader_dataset):
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=8, drop_last=True)
    it = iter(loader)
    for _ in range(len(loader)):
        next(it)
    state = loader.state_dict()                  # the consumer has every batch; the pass has not ended
    resumed = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=8)
    resumed.load_state_dict(state)
    assert [names(b) for b in resumed] == epoch_batches(loader_dataset, seed=8, epoch=1)


def test_a_pass_stopped_after_len_batches_is_a_whole_epoch(loader_dataset):
    """A loop that takes len(loader) batches (islice, zip with range) never asks for the end of the
    pass; the next pass yielded nothing and every later epoch came one pass late. The epoch is done
    once its last batch is handed out, for the live loader as for a resumed one."""
    import itertools

    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=8)
    for epoch in range(3):
        got = [names(b) for b in itertools.islice(loader, len(loader))]
        assert got == epoch_batches(loader_dataset, seed=8, epoch=epoch)
        state = loader.state_dict()
        assert (state["epoch"], state["position"]) == (epoch + 1, 0)
    resumed = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=64, seed=8)
    resumed.load_state_dict(state)
    assert [names(b) for b in resumed] == epoch_batches(loader_dataset, seed=8, epoch=3)
    assert [names(b) for b in resumed] == epoch_batches(loader_dataset, seed=8, epoch=4)   # and on, one a pass


def test_a_rank_reads_ahead_only_the_row_groups_its_own_batches_need(loader_dataset):
    """Batches of 400 rows over windows of 100: rank 0 of 2 takes stream windows 0-3, 8-11, …, so
    it needs about half the row groups, and reading ahead (2 threads) must not fetch the others."""
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=400, world_size=2, rank=0, shuffle_buffer=100,
                           num_workers=2, prefetch=2)
    n = sum(1 for _ in loader)
    assert n == len(loader) >= 4
    order = loader.order(0)
    needed = set()
    for j in range(n):
        pos = order_mod.batch_positions(order.n, 0, j, 400, 2, 0)
        for w in np.unique(pos // order.window):
            needed.update(order.window_units(int(w)))
    assert loader.stats()["rows_read"] == sum(int(order.unit_rows[order.units[k]]) for k in needed)
    assert loader.stats()["rows_read"] < 0.75 * loader.rows


def test_a_numeric_column_with_nulls_is_refused_for_numpy_and_read_as_arrow(loader_dataset):
    from gpuetl.errors import DataError

    sizes = [b.column("size") for b in gpuetl.Loader(loader_dataset, columns=["size"], batch_size=500,
                                                     output="arrow", drop_last=False)]
    assert sum(s.null_count for s in sizes) > 0                  # `-` sizes of the access logs
    with pytest.raises(DataError, match="column 'size' holds nulls"):
        for _ in gpuetl.Loader(loader_dataset, columns=["size"], batch_size=500, drop_last=False):
            pass


def test_a_row_group_is_read_while_the_one_before_it_is_consumed(loader_dataset, monkeypatch):
    """Reading ahead reaches a row group's length past the batch being made (here 200 rows: 10
    batches of 20), so a row group's read is handed to the reader threads while the batches before
    it are still being handed out, not when the batches queued ahead run out (one batch ahead, the
    consumer waited for the read at each row-group boundary: the stub step's wait). The request is
    what is judged: when a reader thread takes it up depends on the machine's load."""
    made, started = [], {}
    assemble, start_read = gpuetl.Loader._assemble, gpuetl.Loader._start_read

    def counting(self, pieces, pool=None):
        out = assemble(self, pieces, pool)
        made.append(1)
        return out

    def noting(self, u, pool):
        started.setdefault(u, len(made))
        return start_read(self, u, pool)

    monkeypatch.setattr(gpuetl.Loader, "_assemble", counting)
    monkeypatch.setattr(gpuetl.Loader, "_start_read", noting)
    B = 20
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=B, shuffle_buffer=100, seed=2, num_workers=1,
                           prefetch=2)
    n = sum(1 for _ in loader)
    order = loader.order(0)
    first_need = {}
    for j in range(n):
        for w, _, _ in order_mod.batch_runs(order.n, 0, j, B, 1, 0, order.window):
            for k in order.window_units(w):
                first_need.setdefault(int(order.units[k]), j)
    far = max(order.window, max(loader.unit_rows)) // B
    late = {u: (started[u], j) for u, j in first_need.items() if j > far and started[u] > j - far // 2}
    assert len(first_need) > 4 and not late, late


def test_the_first_batch_waits_for_its_own_rows_not_for_its_whole_row_group(loader_dataset, monkeypatch):
    """A reader thread decodes a row group a chunk at a time, and a window takes its rows as soon
    as they are decoded: here the read of every row group stops after its first chunk until the
    consumer holds its first batch, which must come out of that first chunk alone."""
    from gpuetl.loader import dataset as dataset_mod
    from gpuetl.loader import loader as loader_mod

    monkeypatch.setattr(loader_mod, "CHUNK_ROWS", 50)
    first_out = threading.Event()
    original = dataset_mod.Dataset.iter_group

    def held(self, shard, group, columns, rows):
        for i, batch in enumerate(original(self, shard, group, columns, rows)):
            if i == 1:
                first_out.wait(10)              # the rest of the row group: only once a batch is out
            yield batch

    def whole(self, shard, group, columns):
        first_out.wait(10)                      # a whole row group: only once a batch is out
        return read_group(self, shard, group, columns)

    read_group = dataset_mod.Dataset.read_group
    monkeypatch.setattr(dataset_mod.Dataset, "iter_group", held)
    monkeypatch.setattr(dataset_mod.Dataset, "read_group", whole)
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=10, shuffle_buffer=50, seed=3, num_workers=2,
                           prefetch=2)
    it = iter(loader)
    t0 = time.perf_counter()
    batch = next(it)
    waited = time.perf_counter() - t0
    assert not first_out.is_set() and waited < 5 and len(batch["_offset"]) == 10
    first_out.set()
    rest = list(it)
    assert 1 + len(rest) == len(loader)


def test_a_batch_is_not_cut_behind_a_row_group_being_read(loader_dataset, monkeypatch):
    """Batches are cut by threads of their own: with one reader thread held up in the read of a
    row group asked for ahead, the batches of the row group already read still come out."""
    gate = threading.Event()
    fill = gpuetl.Loader._fill

    def held(self, u, reading):
        if u not in first:
            gate.wait(10)                       # a read ahead that takes its time
        return fill(self, u, reading)

    monkeypatch.setattr(gpuetl.Loader, "_fill", held)
    loader = gpuetl.Loader(loader_dataset, columns=NAMES, batch_size=10, shuffle_buffer=50, seed=4, num_workers=1,
                           prefetch=3)
    order = loader.order(0)
    first = {int(order.units[k]) for k in order.window_units(0)}
    it = iter(loader)
    t0 = time.perf_counter()
    got = [next(it) for _ in range(5)]          # window 0: 50 rows of the first row group
    assert time.perf_counter() - t0 < 5 and not gate.is_set() and len(got) == 5
    gate.set()
    assert 5 + sum(1 for _ in it) == len(loader)


@pytest.mark.parametrize("n, start, B, W, window", [(1000, 0, 64, 1, 100), (1000, 130, 64, 3, 100), (50, 0, 64, 2, 100),
                                                    (1000, 0, 1000, 1, 10_000), (999, 17, 7, 5, 13)])
def test_batch_runs_are_the_batch_positions_in_window_runs(n, start, B, W, window):
    """order.batch_runs (what both the host and the device cut batches by) covers exactly the
    positions order.batch_positions gives, in order, each run inside one window, padding wrapped."""
    steps = order_mod.steps(n, start, B, W, drop_last=False)
    for j in range(steps):
        for rank in range(W):
            want = order_mod.batch_positions(n, start, j, B, W, rank)
            runs = order_mod.batch_runs(n, start, j, B, W, rank, window)
            got = np.concatenate([np.arange(w * window + lo, w * window + hi) for w, lo, hi in runs])
            np.testing.assert_array_equal(got, want)
            assert all(0 <= lo < hi <= window for _, lo, hi in runs)


@pytest.fixture(scope="module")
def empty_shard_dataset(tmp_path_factory):
    """5 rows in 4 shards of 2-row groups: one shard is a single row group of 0 rows (as an append
    version whose records were all filtered, or shard.count above a split's rows, writes one)."""
    from conftest import access_spec
    from gpuetl.samples import write_access_logs

    base = tmp_path_factory.mktemp("empty-shard")
    (base / "in").mkdir()
    write_access_logs(base / "in" / "a.log", lines=5, seed=1)
    spec = access_spec(source__provenance=True, shard={"count": 4})
    spec["sink"]["row_group_rows"] = 2
    gpuetl.Pipeline.from_dict(spec, base_dir=base).run(backend="cpu", scheduler="sync", report=False)
    return base / "out"


def test_an_empty_shard_reads_with_reader_threads(empty_shard_dataset):
    """A 0-row row group in the middle of the stream gave a reader thread no batch to take the
    schema from (a raw pyarrow ValueError with num_workers > 0); it gives no rows, the same batches
    for any num_workers."""
    probe = gpuetl.Loader(empty_shard_dataset, split=None, columns=NAMES, batch_size=2)
    assert 0 in probe.unit_rows and probe.rows == 5
    middle = 0
    for seed in range(12):
        order = probe.order(0) if seed == 0 else gpuetl.Loader(empty_shard_dataset, split=None, seed=seed).order(0)
        rows = [int(order.unit_rows[u]) for u in order.units]
        middle += 0 < rows.index(0) < len(rows) - 1
        runs = [epoch_batches(empty_shard_dataset, split=None, batch_size=2, seed=seed, num_workers=w, drop_last=False)
                for w in (0, 2)]
        assert runs[0] == runs[1] and len(set(flat(runs[0]))) == 5
    assert middle                                   # the empty row group lay inside a window


def test_a_window_over_2_gib_of_strings_gives_batches_of_their_own_types(loader_dataset, monkeypatch):
    """A shuffle window holding more string or binary bytes than 32-bit offsets reach (raw images:
    2 GiB) failed with Arrow's offset overflow when batches were taken from it. Such a window holds
    the column with 64-bit offsets and each batch gets the column's own type back; the limit is
    made small here so that a test needs no GiBs (the real size was checked by hand)."""
    from gpuetl.loader import loader as loader_mod

    cols = ["_file", "_offset", "path"]
    kw = dict(columns=cols, batch_size=64, seed=4, shuffle_buffer=500, output="arrow")
    plain = [b.to_pylist() for b in gpuetl.Loader(loader_dataset, **kw)]
    windows = []
    window = loader_mod._HostBatches.window

    def noting(self, parts, perm):
        out = window(self, parts, perm)
        windows.append(out.schema)
        return out

    monkeypatch.setattr(loader_mod, "OFFSET_LIMIT", 1000)
    monkeypatch.setattr(loader_mod._HostBatches, "window", noting)
    loader = gpuetl.Loader(loader_dataset, **kw)
    batches = list(loader)
    assert windows and all(s.field("path").type == pa.large_string() for s in windows)   # the wide path ran
    assert {b.schema.field("path").type for b in batches} == {pa.string()}
    assert {b.schema.field("_file").type for b in batches} == {loader.data.schema.field("_file").type}
    assert [b.to_pylist() for b in batches] == plain


@pytest.mark.parametrize("kw, match", [({"columns": "status"}, r"list of column names.*columns=\['status'\]"),
                                       ({"columns": ["status", 3]}, "list of column names"),
                                       ({"dataset": None}, "dataset must be a dataset folder")])
def test_a_str_for_columns_or_no_dataset_is_a_clear_error(loader_dataset, kw, match):
    """columns="status" was read as the columns 's', 't', …; Loader(None) was a raw TypeError."""
    kw = {"dataset": loader_dataset, **kw}
    with pytest.raises(SpecError, match=match):
        gpuetl.Loader(kw.pop("dataset"), **kw)


@pytest.mark.parametrize("key, value", [("epoch", "x"), ("epoch", -1), ("epoch", 1.5), ("position", True)])
def test_a_state_with_a_non_integer_epoch_or_position_is_refused(loader_dataset, key, value):
    """A damaged state's epoch was a raw ValueError (int("x")), or taken as it was (1.5, True)."""
    loader = gpuetl.Loader(loader_dataset, columns=NAMES)
    with pytest.raises(SpecError, match=f"state's {key} is not an integer"):
        loader.load_state_dict({**loader.state_dict(), key: value})
