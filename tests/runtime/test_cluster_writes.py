"""On a cluster of worker processes the workers write the shards; the client commits only.

Where the tasks run in other processes (a LocalCUDACluster, a scheduler address), the process
that runs `run()` opens no spilled piece and no shard or quarantine file: a worker reads the
pieces and encodes the files (runtime/phases/sharding.py), on its own device and memory, and
sends back with each shard what its footer says of the columns (sinks/column_stats.py), which
the run report's column profile and the empty-declared-column check use; the report's first
quarantined record of each kind is read in a task too (runtime/report.py). The streaming
writer, which reads each partition's pieces as it finishes, runs only where the tasks run in the
calling process.

How it is seen: pyarrow's entry points that open a spilled piece (`pyarrow.memory_map`, what
every IPC piece is read through), start a Parquet file (`pyarrow.parquet.ParquetWriter`, what
every shard and quarantine file is encoded through) or read one (`ParquetFile`,
`read_metadata`, `read_schema`, `read_table`), and the file opens (`open`, `os.open`, an fsspec
filesystem's `open`) are wrapped in the client and in every worker process, each call recording
its process id and path in a log folder. The client must have none on the run's pieces and
files, and the workers must have them all, so the check cannot pass by recording nothing.
"""

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import access_spec
from gpuetl import Pipeline
from hostile.conftest import snapshot

pytestmark = pytest.mark.slow          # worker processes start, each importing pyarrow, pandas and dask


def recording(log_dir: str):
    """(the wrapped entry points for this process, a function that wraps a worker's), each call
    recording (pid, kind, path) in log_dir/<pid>.log. Both are built inside this function so
    that cloudpickle sends them to the workers by value (the workers need not import this file);
    a worker keeps its wrapping until the cluster closes."""

    def wrappers() -> dict:
        import builtins
        import io

        import fsspec.spec
        import pyarrow as pa
        import pyarrow.parquet as pq

        real_map, real_writer = pa.memory_map, pq.ParquetWriter
        real_file, real_metadata, real_schema, real_table = pq.ParquetFile, pq.read_metadata, pq.read_schema, \
            pq.read_table
        real_open, real_os_open, real_fs_open = builtins.open, os.open, fsspec.spec.AbstractFileSystem.open

        def record(kind: str, path) -> None:
            if isinstance(path, (str, os.PathLike)):
                with real_open(os.path.join(log_dir, f"{os.getpid()}.log"), "a") as fh:
                    fh.write(f"{kind}\t{os.fspath(path)}\n")

        def memory_map(path, *args, **kwargs):
            record("read-piece", path)
            return real_map(path, *args, **kwargs)

        class ParquetWriter(real_writer):
            def __init__(self, where, *args, **kwargs):
                record("encode", where)
                super().__init__(where, *args, **kwargs)

        class ParquetFile(real_file):
            def __init__(self, source, *args, **kwargs):
                record("read-parquet", source)
                super().__init__(source, *args, **kwargs)

        def reading(kind, real):
            def wrapped(where, *args, **kwargs):
                record(kind, where)
                return real(where, *args, **kwargs)
            return wrapped

        def os_open(path, *args, dir_fd=None, **kwargs):
            # a name under a folder descriptor: its path is not known, its name is recorded
            record("open" if dir_fd is None else "open-at", path)
            return real_os_open(path, *args, dir_fd=dir_fd, **kwargs)

        return {(pa, "memory_map"): memory_map, (pq, "ParquetWriter"): ParquetWriter,
                (pq, "ParquetFile"): ParquetFile, (pq, "read_metadata"): reading("read-footer", real_metadata),
                (pq, "read_schema"): reading("read-footer", real_schema),
                (pq, "read_table"): reading("read-parquet", real_table),
                (builtins, "open"): reading("open", real_open), (io, "open"): reading("open", real_open),
                (os, "open"): os_open, (fsspec.spec.AbstractFileSystem, "open"): reading("open", real_fs_open)}

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


DATA_FILES = (".arrow", ".parquet", ".parquet.partial")    # spilled pieces, shards and quarantine files (and partial ones)


def of_the_run(path: str, out: Path) -> bool:
    """A spilled piece or a shard/quarantine file of a run into `out` (all under out/_tmp/)."""
    return path.startswith(str(out / "_tmp") + os.sep) and path.endswith(DATA_FILES)


def without_run_fields(manifest: dict) -> dict:
    """A manifest less what differs between two runs of the same input (ids, times, where; the
    pipeline's hashes: the two pipelines differ in sink.path; the reports: they hold times)."""
    from output_identity import RUN_FIELDS

    other = RUN_FIELDS | {"reports", "sink", "pipeline_sha256", "fingerprint"}

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in other}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(manifest)


def report_of(result) -> dict:
    """The run report's contents that depend on the data alone."""
    report = json.loads((result.out_dir / "_report.json").read_text())
    return {k: report[k] for k in ("counts", "stages", "bad_records", "warnings", "columns")}


def sha256s(result) -> dict:
    files = [s["path"] for s in result.shards + result.quarantine]
    return {f: hashlib.sha256((result.out_dir / f).read_bytes()).hexdigest() for f in files}


@pytest.fixture(scope="module")
def process_cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def run_watched(tmp_path: Path, client, spec: dict):
    """Run `spec` on the cluster with every process's entry points wrapped; (its result, the
    calls on the run's pieces and data files, the workers' process ids). Asserts that the client
    made none of those calls, and that nothing outside the dataset changed."""
    log_dir = tmp_path / "opened"
    log_dir.mkdir()
    wrappers, install = recording(str(log_dir))
    workers = set(client.run(install).values())
    around = {k: v for k, v in snapshot(tmp_path, tmp_path / "out").items() if not k.startswith("opened")}
    with pytest.MonkeyPatch.context() as patch:
        for (module, name), wrapped in wrappers().items():
            patch.setattr(module, name, wrapped)
        result = Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", client=client)
    assert {k: v for k, v in snapshot(tmp_path, tmp_path / "out").items() if not k.startswith("opened")} == around

    out = result.out_dir
    everything = calls(log_dir)
    seen = [(pid, kind, path) for pid, kind, path in everything if of_the_run(path, out)]
    here = [c for c in seen if c[0] == os.getpid()]
    here += [c for c in everything if c[0] == os.getpid() and c[1] == "open-at" and c[2].endswith(DATA_FILES)]
    assert here == [], f"the client opened the run's pieces or data files: {here[:5]}"
    assert {pid for pid, _, _ in seen} <= workers
    return result, seen


def check_same_as_in_process(tmp_path: Path, spec: dict, result) -> None:
    """The same pipeline run in this process writes the same files, manifest and report."""
    alone = Pipeline.from_dict({**spec, "sink": {**spec["sink"], "path": "alone"}}, base_dir=tmp_path).run(
        backend="cpu", scheduler="sync")            # in this process: the streaming writer, for in-order rows
    assert sha256s(alone) == sha256s(result) and alone.shards == result.shards
    assert without_run_fields(alone.manifest) == without_run_fields(result.manifest)
    assert report_of(alone) == report_of(result)


@pytest.mark.parametrize("shard", [
    {"splits": {"train": 0.8, "val": 0.2}},                       # rows in input order: streamed in-process
    {"target_bytes": "64KiB", "key": ["ip"], "shuffle": True},    # cut by size: the sizing reads a sample
], ids=["in-input-order", "by-size"])
def test_the_client_opens_no_piece_and_no_shard_or_quarantine_file(tmp_path, access_logs, process_cluster, shard):
    spec = access_spec(shard=shard, steps=[{"filter": "status >= 200"}], on_error="quarantine",
                       source__blocksize="48KiB")
    result, seen = run_watched(tmp_path, process_cluster, spec)
    out = result.out_dir
    run_tmp = out / "_tmp" / result.manifest["run"]["id"]
    encoded = {Path(path.removesuffix(".partial")).relative_to(run_tmp / "data").as_posix()
               for _, kind, path in seen if kind == "encode"}
    assert encoded >= {s["path"] for s in result.shards + result.quarantine}, encoded  # every file, by a worker
    pieces_read = {path for _, kind, path in seen if kind == "read-piece" and f"{os.sep}spill{os.sep}" in path}
    assert len(pieces_read) >= len(result.shards) >= 2 and result.quarantine, (pieces_read, result.shards)
    # the report's first quarantined records: read by a worker
    quarantine_read = {Path(path).relative_to(run_tmp / "data").as_posix()
                       for _, kind, path in seen if kind == "read-parquet"}
    assert quarantine_read == {q["path"] for q in result.quarantine}, quarantine_read

    assert not (out / "_tmp").exists()          # the run's pieces and folder are gone with it
    c = result.counts
    assert c["quarantined"] == 10 and c["rows_in"] == 6000
    assert c["rows_in"] == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    report = report_of(result)
    assert {col["column"] for col in report["columns"]} >= {"ip", "status", "user_agent"}
    assert all(kind.get("first") for kind in report["bad_records"]["kinds"]), report["bad_records"]
    check_same_as_in_process(tmp_path, spec, result)


def test_the_empty_column_check_opens_no_shard_in_the_client(tmp_path, process_cluster):
    """A JSON source's declared column that every record leaves null is found from the null counts the
    workers sent back with the shards."""
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": i, "text": f"record {i}", "missing": None, **({"extra": i} if i % 3 else {})})
             for i in range(3000)]
    (tmp_path / "in" / "a.jsonl").write_text("\n".join(lines) + "\n")
    spec = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": "in/a.jsonl", "blocksize": "32KiB"},
            "columns": {"id": "int64", "text": "string", "missing": "string"}, "extra_fields": "drop",
            "shard": {"count": 3, "key": ["id"]}, "sink": {"path": "out", "mode": "overwrite", "row_group_rows": 500}}
    result, seen = run_watched(tmp_path, process_cluster, spec)
    assert result.manifest["empty_columns"] == ["missing"]
    assert result.manifest["extra_fields"]["dropped"] == {"extra": 2000}
    assert len({path for _, kind, path in seen if kind == "encode"}) >= 3
    c = result.counts
    assert c["rows_in"] == 3000 == c["rows_out"] + c["filtered"] + c["deduplicated"] + c["quarantined"]
    check_same_as_in_process(tmp_path, spec, result)
