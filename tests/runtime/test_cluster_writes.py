"""On a cluster of worker processes the workers write the shards; the client commits only.

Where the tasks run in other processes (a LocalCUDACluster, a scheduler address), the process
that runs `run()` reads no spilled piece and encodes no shard or quarantine file: a worker does
(runtime/phases/sharding.py), on its own device and memory. The streaming writer, which reads
each partition's pieces as it finishes, runs only where the tasks run in the calling process.

How it is seen: pyarrow's entry points that open a spilled piece (`pyarrow.memory_map`, what
every IPC piece is read through) and start a Parquet file (`pyarrow.parquet.ParquetWriter`, what
every shard and quarantine file is encoded through) are wrapped in the client and in every worker
process, each call recording its process id and path in a log folder. The client must have none
on the run's pieces and files, and the workers must have them all, so the check cannot pass by
recording nothing. The client still reads the written shards' Parquet footers (the run report's
column profile, the empty-column check): footers, not pieces or encoding.
"""

import hashlib
import os
from pathlib import Path

import pytest

from conftest import access_spec
from gpuetl import Pipeline
from hostile.conftest import snapshot

pytestmark = pytest.mark.slow          # worker processes start, each importing pyarrow, pandas and dask


def recording(log_dir: str):
    """(the wrapped pyarrow entry points for this process, a function that wraps a worker's),
    each call recording (pid, kind, path) in log_dir/<pid>.log. Both are built inside this
    function so that cloudpickle sends them to the workers by value (the workers need not import
    this file); a worker keeps its wrapping until the cluster closes."""

    def wrappers() -> dict:
        import pyarrow as pa
        import pyarrow.parquet as pq

        real_map, real_writer = pa.memory_map, pq.ParquetWriter

        def record(kind: str, path) -> None:
            if isinstance(path, (str, os.PathLike)):
                with open(os.path.join(log_dir, f"{os.getpid()}.log"), "a") as fh:
                    fh.write(f"{kind}\t{os.fspath(path)}\n")

        def memory_map(path, *args, **kwargs):
            record("read-piece", path)
            return real_map(path, *args, **kwargs)

        class ParquetWriter(real_writer):
            def __init__(self, where, *args, **kwargs):
                record("encode", where)
                super().__init__(where, *args, **kwargs)

        return {(pa, "memory_map"): memory_map, (pq, "ParquetWriter"): ParquetWriter}

    def install() -> int:
        for (module, name), wrapped in wrappers().items():
            setattr(module, name, wrapped)
        return os.getpid()

    return wrappers, install


def calls(log_dir: Path) -> list[tuple[int, str, str]]:
    out = []
    for log in log_dir.glob("*.log"):
        pid = int(log.stem)
        out += [(pid, *line.split("\t", 1)) for line in log.read_text().splitlines()]
    return out


def of_the_run(path: str, out: Path) -> bool:
    """A spilled piece or a shard/quarantine file of a run into `out` (all under out/_tmp/)."""
    return path.startswith(str(out / "_tmp") + os.sep)


def sha256s(result) -> dict:
    files = [s["path"] for s in result.shards + result.quarantine]
    return {f: hashlib.sha256((result.out_dir / f).read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def process_cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


@pytest.mark.parametrize("shard", [
    {"splits": {"train": 0.8, "val": 0.2}},                       # rows in input order: streamed in-process
    {"target_bytes": "64KiB", "key": ["ip"], "shuffle": True},    # cut by size: the sizing reads a sample
], ids=["in-input-order", "by-size"])
def test_the_client_reads_no_piece_and_encodes_no_shard(tmp_path, access_logs, process_cluster, monkeypatch, shard):
    log_dir = tmp_path / "opened"
    log_dir.mkdir()
    client = process_cluster
    wrappers, install = recording(str(log_dir))
    workers = set(client.run(install).values())
    for (module, name), wrapped in wrappers().items():
        monkeypatch.setattr(module, name, wrapped)
    spec = access_spec(shard=shard, steps=[{"filter": "status >= 200"}], on_error="quarantine",
                       source__blocksize="48KiB")
    around = {k: v for k, v in snapshot(tmp_path, tmp_path / "out").items() if not k.startswith("opened")}
    result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", client=client)
    monkeypatch.undo()
    assert {k: v for k, v in snapshot(tmp_path, tmp_path / "out").items() if not k.startswith("opened")} == around

    out = result.out_dir
    seen = [(pid, kind, path) for pid, kind, path in calls(log_dir) if of_the_run(path, out)]
    here = [c for c in seen if c[0] == os.getpid()]
    assert here == [], f"the client opened the run's pieces or encoded its files: {here[:5]}"
    assert {pid for pid, _, _ in seen} <= workers
    run_tmp = out / "_tmp" / result.manifest["run"]["id"]
    encoded = {Path(path.removesuffix(".partial")).relative_to(run_tmp / "data").as_posix()
               for _, kind, path in seen if kind == "encode"}
    assert encoded >= {s["path"] for s in result.shards + result.quarantine}, encoded  # every file, by a worker
    pieces_read = {path for _, kind, path in seen if kind == "read-piece" and f"{os.sep}spill{os.sep}" in path}
    assert len(pieces_read) >= len(result.shards) >= 2 and result.quarantine, (pieces_read, result.shards)

    assert not (out / "_tmp").exists()          # the run's pieces and folder are gone with it
    c = result.counts
    assert c["quarantined"] == 10 and c["rows_in"] == 6000
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    alone = Pipeline.from_dict({**spec, "sink": {**spec["sink"], "path": "alone"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")            # in this process: the streaming writer, for in-order rows
    assert sha256s(alone) == sha256s(result) and alone.shards == result.shards
