"""A source format owns its reading, and what the reading counts travels as declared counters:
the runtime calls the source stage's one `read` and branches on no format; the fields a JSON
parser dropped and the hashes of what was read come out of the partition's task next to its
frame (sources/counters.py) and arrive in its map result, never through `DataFrame.attrs`."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import gpuetl
from gpuetl.backends.cpu import CpuBackend
from gpuetl.plan.compile import compile_plan
from gpuetl.runtime.phases import mapping
from gpuetl.runtime.partition import read_partition
from gpuetl.sources.counters import CountedFrame, PartitionCounters
from gpuetl.sources.pins import digest

PACKAGE = Path(gpuetl.__file__).parent


def _records(n: int) -> list[dict]:
    """JSON objects, some with fields no column reads: `extra` in every third, `late` in the last five."""
    out = []
    for i in range(n):
        rec = {"id": i % 50, "text": f"record {i} " + "x" * (i % 30)}
        if i % 3 == 0:
            rec["extra"] = {"n": i}
        if i >= n - 5:
            rec["late"] = i
        out.append(rec)
    return out


def _write_jsonl(folder: Path, records: list[dict]) -> bytes:
    folder.mkdir(exist_ok=True)
    data = "".join(json.dumps(r) + "\n" for r in records).encode()
    (folder / "a.jsonl").write_bytes(data)
    return data


def _plan(base: Path, spec: dict, backend):
    return compile_plan(gpuetl.Pipeline.from_dict(spec, base_dir=base).loaded, backend)


def test_no_gpuetl_module_reads_or_writes_a_frames_attrs():
    """Per-partition statistics are declared counters: `DataFrame.attrs` (which pandas copies on
    some operations and drops on others, and cuDF does not carry) is used nowhere."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if "attrs" not in text:
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Attribute) and node.attr == "attrs":
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, found


def test_the_runtime_asks_the_source_stage_to_read_and_knows_no_format():
    """runtime/partition.py and runtime/graph.py import no source format, stage kind, framing or
    row-group reader, and read no attribute that names one (parquet, framing, parser)."""
    for name in ("partition.py", "graph.py"):
        tree = ast.parse((PACKAGE / "runtime" / name).read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not imported & {"..sources.stage", "..sources.formats", "..sources.framing", "..sources.parquet",
                               "..sources.images", "..sources.registry", "..sources.parsers"}, (name, imported)
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not attributes & {"parquet", "framing", "parser", "read_pieces"}, (name, attributes)


FORMAT_MODULES = {"sources.stage", "sources.formats", "sources.framing", "sources.parquet", "sources.images",
                  "sources.registry", "sources.parsers", "sources.json_fields"}


def _imported(tree: ast.AST) -> set[str]:
    """The modules a module imports, its leading dots dropped ("...sources.formats.jsonl" →
    "sources.formats.jsonl"), and the names it imports from each, as "module.name"."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            module = node.module.lstrip(".").removeprefix("gpuetl.")
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name.removeprefix("gpuetl.") for alias in node.names)
    return found


FORMAT_WORDS = {"jsonl", "csv", "parquet", "images", "preset", "dropped_fields", "extra_fields"}


def test_the_run_and_its_phases_know_no_source_format():
    """runtime/run.py and every phase (runtime/phases/) import no source format, stage kind,
    parser or JSON helper, and name no format in their code: the source stage's own
    `summarize` gives the manifest what a format counted (the JSON formats' dropped fields)."""
    modules = [PACKAGE / "runtime" / "run.py", *sorted((PACKAGE / "runtime" / "phases").glob("*.py"))]
    for path in modules:
        tree = ast.parse(path.read_text())
        named = {m for m in _imported(tree) if any(m == f or m.startswith(f + ".") for f in FORMAT_MODULES)}
        assert not named, (path.name, named)
        words = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        words |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        words |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        assert not words & FORMAT_WORDS, (path.name, words & FORMAT_WORDS)


def test_the_json_stage_summarizes_its_dropped_fields_and_other_stages_say_nothing(tmp_path):
    """The manifest's extra_fields.dropped and its note come from the JSON stage's summary of
    every partition's counters; a CSV, text or Parquet stage gives an empty summary."""
    from gpuetl.sources.counters import SourceSummary, summarize

    _write_jsonl(tmp_path / "in", _records(30))
    spec = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": "in/a.jsonl"},
            "columns": {"id": "int64", "text": "string"}, "extra_fields": "drop", "sink": {"path": "out"}}
    plan = _plan(tmp_path, spec, CpuBackend())
    stage = plan.segments[0].source
    counted = [PartitionCounters({"extra": 4, "late": 1}), PartitionCounters({"extra": 6})]
    summary = summarize(stage, plan.spec, counted, plan.metadata)
    assert summary.fields["extra_fields"]["dropped"] == {"extra": 10, "late": 1}
    assert summary.fields["extra_fields"]["mode"] == "drop"
    assert summary.notes == ["source: 2 field(s) not in columns were dropped: extra (10 records), late (1 record)"]
    assert summary.filled == ("id", "text")
    uncounted = summarize(stage, plan.spec, [PartitionCounters(), PartitionCounters(uncounted=True)], plan.metadata)
    assert uncounted.fields["extra_fields"]["dropped"] is None

    (tmp_path / "in" / "a.csv").write_text("id,text\n1,a\n")
    csv = _plan(tmp_path, {"version": 1, "name": "t", "source": {"type": "csv", "path": "in/a.csv"},
                           "sink": {"path": "out"}}, CpuBackend())
    assert summarize(csv.segments[0].source, csv.spec, [PartitionCounters()], csv.metadata) == SourceSummary()
    assert summarize(object(), csv.spec, [], {}) == SourceSummary()      # a plugin's stage without one


def test_counters_add_up_the_pieces_and_one_uncounted_piece_makes_the_partition_uncounted():
    c = PartitionCounters()
    assert c.dropped_fields is None                      # no parser said anything
    c.add_dropped_fields({})
    assert c.dropped_fields == {}                        # counted: nothing dropped
    c.add_dropped_fields({"a": 2})
    c.add_dropped_fields({"a": 1, "b": 4})
    assert c.dropped_fields == {"a": 3, "b": 4}
    c.add_dropped_fields(None)                           # a piece its backend did not count
    c.add_dropped_fields({"a": 1})
    assert c.dropped_fields is None and c.uncounted


@pytest.mark.parametrize("piece_bytes", [1 << 30, 1500])
def test_a_json_partition_hands_its_dropped_fields_and_pins_next_to_its_frame(tmp_path, monkeypatch, piece_bytes):
    """Read whole or in pieces of 1.5 KB, one partition's counters hold the exact count of each
    dropped field and the hash of the range read; the frame holds the rows alone."""
    records = _records(300)
    data = _write_jsonl(tmp_path / "in", records)
    monkeypatch.setattr(CpuBackend, "piece_bytes", piece_bytes)
    spec = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": "in/a.jsonl"},
            "columns": {"id": "int64", "text": "string"}, "extra_fields": "drop", "sink": {"path": "out"}}
    backend = CpuBackend()
    plan = _plan(tmp_path, spec, backend)
    (partition,) = plan.partitions
    part = read_partition(partition, plan.segments[0], backend)
    assert isinstance(part, CountedFrame) and isinstance(part.counters, PartitionCounters)
    assert len(part.frame) == 300
    assert part.counters.dropped_fields == {"extra": 100, "late": 5}
    assert [tuple(p) for p in part.counters.read_pins] == [(0, 0, len(data), digest(data))]


def test_a_parquet_partition_pins_its_files_and_counts_no_dropped_fields(tmp_path):
    (tmp_path / "in").mkdir()
    pq.write_table(pa.table({"n": list(range(100))}), tmp_path / "in" / "a.parquet", row_group_size=30)
    spec = {"version": 1, "name": "t", "source": {"type": "parquet", "path": "in/a.parquet"}, "sink": {"path": "out"}}
    backend = CpuBackend()
    plan = _plan(tmp_path, spec, backend)
    (partition,) = plan.partitions
    part = read_partition(partition, plan.segments[0], backend)
    size = (tmp_path / "in" / "a.parquet").stat().st_size
    assert len(part.frame) == 100 and part.counters.dropped_fields is None
    assert [tuple(p) for p in part.counters.read_pins] == [(0, 0, size, None)]     # read by pyarrow: not hashed


@pytest.mark.slow
def test_counters_arrive_in_each_map_result_through_a_global_step(tmp_path, monkeypatch):
    """Across partitions, pieces and a dedupe (whose tasks build new frames), each partition's
    map result carries its counters: the dropped fields add up to the input's, the pins cover
    every byte once, and the manifest says both."""
    records = _records(2000)
    data = _write_jsonl(tmp_path / "in", records)
    monkeypatch.setattr(CpuBackend, "piece_bytes", 4000)
    results = []
    real = mapping.spill_partition

    def kept(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    monkeypatch.setattr(mapping, "spill_partition", kept)
    spec = {"version": 1, "name": "t", "source": {"type": "jsonl", "path": "in/a.jsonl", "blocksize": "16KiB"},
            "columns": {"id": "int64", "text": "string"}, "extra_fields": "drop",
            "steps": [{"filter": "id != 7"}, {"dedupe": {"on": ["id"]}}], "sink": {"path": "out"}}
    result = gpuetl.Pipeline.from_dict(spec, base_dir=tmp_path).run(backend="cpu", scheduler="threads")
    assert result.counts["rows_out"] == 49
    assert len(results) == len(result.manifest["inputs"][0]["content"]["ranges"]) > 3
    total: dict[str, int] = {}
    for r in results:
        assert isinstance(r.counters, PartitionCounters)
        for name, n in r.counters.dropped_fields.items():
            total[name] = total.get(name, 0) + n
    assert total == {"extra": 667, "late": 5}
    assert result.manifest["extra_fields"]["dropped"] == {"extra": 667, "late": 5}
    spans = sorted((p.start, p.end) for r in results for p in r.counters.read_pins)
    assert spans[0][0] == 0 and spans[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))      # every byte read once, by one partition


def test_a_counted_frame_is_sized_as_its_frame():
    """Workers size (and dask-cuda spills) a task's result by what is inside: a CountedFrame is a
    tuple, so dask's sizeof (and dask-cuda's is_device_object) look at the frame."""
    import pandas as pd
    from dask.sizeof import sizeof

    df = pd.DataFrame({"s": ["x" * 100] * 10_000})
    assert sizeof(CountedFrame(df, PartitionCounters())) >= sizeof(df) > 1_000_000
