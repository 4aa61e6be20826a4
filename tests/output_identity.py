"""Record what every example pipeline and a set of parsing corpora write, to check that a change
of structure changes no output byte.

    python tests/output_identity.py record before.json      # on the tree before the change
    python tests/output_identity.py record after.json       # on the tree after it
    python tests/output_identity.py compare before.json after.json

`record` writes the sample data (`python -m gpuetl.samples`, 20 photos) and the corpora into a
temporary folder, runs each case on the CPU backend and keeps the sha256 of every shard and
quarantine file, the run's counts and the manifest less its `run` fields (its id, times and
versions). `compare` lists every difference and exits 1 if there is one. A few minutes on two
cores; nothing is written outside the temporary folder and the JSON file named."""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Manifest fields that differ between two runs of the same input (ids, clocks, versions, where the
# temporary folder and its files are: the inputs' identity); the ranges' hashes stay
RUN_FIELDS = {"run_id", "created", "created_at", "started", "finished", "duration_s", "versions",
              "gpuetl_version", "run", "elapsed_s", "host_transfer", "input_tiers", "out_dir", "resumed",
              "identity", "location", "mtime_ns"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _without_run_fields(value):
    if isinstance(value, dict):
        return {k: _without_run_fields(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_without_run_fields(v) for v in value]
    return value


def _outputs(out: Path) -> dict:
    files = {}
    for p in sorted(out.rglob("*")):
        rel = p.relative_to(out).as_posix()
        if p.is_file() and (p.suffix == ".parquet"):
            files[rel] = _sha(p)
    manifest = json.loads((out / "_manifest.json").read_text()) if (out / "_manifest.json").exists() else None
    return {"files": files, "manifest": _without_run_fields(manifest)}


# -- corpora --------------------------------------------------------------------------------------

def _csv_corpus(folder: Path) -> None:
    rng = random.Random(7)
    rows = ["id,name,score,note\n"]
    for i in range(3000):
        name = rng.choice(["ann", "bo", "\"quoted, name\"", "multi\nline", "", "é ü"])
        if name.startswith('"') or "\n" in name or "," in name:
            name = '"' + name.replace('"', '""') + '"'
        score = rng.choice([str(rng.randint(0, 100)), "x", "", "3.5"])
        note = rng.choice(["ok", "", "a \"\"b\"\"", "NA"])
        end = "\r\n" if i % 3 == 0 else "\n"
        if i % 97 == 0:
            rows.append(f"{i},only two{end}")          # too few fields
        else:
            rows.append(f"{i},{name},{score},{note}{end}")
    (folder / "a.csv").write_text("".join(rows), newline="")
    (folder / "b.csv").write_bytes(b"id,name,score,note\n1,\xff\xfe bad,2,x\n2,fine,3,y\n3,\"open quote,4,z\n")


def _jsonl_corpus(folder: Path) -> None:
    rng = random.Random(11)
    lines = []
    for i in range(4000):
        rec = {"id": i, "user": {"id": rng.randint(1, 50), "name": rng.choice(["a", "b", None])},
               "tags": rng.sample(["x", "y", "z"], rng.randint(0, 3)), "v": rng.choice([1, 2.5, None, "s"])}
        if i % 5 == 0:
            rec["extra_" + rng.choice("abc")] = i
        if i % 7 == 0:
            rec["deep"] = {"k": [1, {"m": i}]}
        line = json.dumps(rec)
        if i % 131 == 0:
            line = line[:-3]                               # broken
        if i % 173 == 0:
            line = "[1, 2]"                                # not an object
        lines.append(line + ("\r\n" if i % 11 == 0 else "\n"))
    lines.append('{"id": 99999, "user": {"id": 1}, "bad": "\udcff"}\n'.encode("utf-8", "surrogateescape")
                 .decode("utf-8", "replace"))
    (folder / "a.jsonl").write_text("".join(lines))
    with gzip.open(folder / "b.jsonl.gz", "wt") as fh:
        fh.write("".join(lines[:1500]))
    (folder / "c.jsonl").write_bytes(b'{"id": 1, "user": {"id": 2}}\n{"id": 2, "user": \xff}\n{"id": 3}')


def _text_corpus(folder: Path) -> None:
    rng = random.Random(3)
    lines = []
    for i in range(5000):
        if i % 41 == 0:
            lines.append(b"garbage line " + bytes([rng.randint(0x80, 0xff)]) + b"\n")
        else:
            lines.append(f"2024-01-{1 + i % 28:02d} 10:{i % 60:02d}:00 [{rng.choice(['INFO', 'WARN', 'ERROR'])}] "
                         f"worker-{i % 9} {'x' * rng.randint(0, 80)} took={rng.randint(1, 999)}ms\n".encode())
    (folder / "a.log").write_bytes(b"".join(lines))
    (folder / "b.log").write_bytes(b"\r\n".join(lines[:300]) + b"no newline at the end")
    with bz2.open(folder / "c.log.bz2", "wb") as fh:
        fh.write(b"".join(lines[:2000]))
    (folder / "long.log").write_bytes(lines[0] + b"L" * 300_000 + b"\n" + lines[1])


def _multiline_corpus(folder: Path) -> None:
    rng = random.Random(5)
    out = []
    for i in range(1500):
        out.append(f"2024-02-01 12:00:{i % 60:02d}.123 {rng.choice(['INFO', 'ERROR'])}  [main] app.X - event {i}\n")
        for _ in range(rng.choice([0, 0, 0, 2, 5])):
            out.append(f"\tat com.example.Foo.bar(Foo.java:{rng.randint(1, 500)})\n")
        if i % 200 == 0:
            out.append("a continuation that starts no record\n")
    (folder / "app.log").write_text("".join(out))


def _parquet_corpus(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(9)
    n = 20_000
    table = pa.table({"id": list(range(n)), "when": [rng.choice(["2024-01-01", "bad", None, "2023-12-31"])
                                                     for _ in range(n)],
                      "x": [rng.random() if rng.random() > 0.1 else None for _ in range(n)],
                      "s": [rng.choice(["a", "b", "é", ""]) for _ in range(n)]})
    pq.write_table(table, folder / "a.parquet", row_group_size=3000)
    pq.write_table(table.slice(0, 500), folder / "b.parquet", row_group_size=100)


def _spec(name, source, *, parse=None, columns=None, steps=(), on_error="quarantine", shard=None, **more):
    s = {"version": 1, "name": name, "source": source, "steps": list(steps), "on_error": on_error,
         "sink": {"path": f"out/{name}", "mode": "overwrite"}}
    if parse:
        s["parse"] = parse
    if columns:
        s["columns"] = columns
    if shard:
        s["shard"] = shard
    s.update(more)
    return s


def corpus_cases() -> list[dict]:
    dedupe = {"dedupe": {"on": ["id"]}}
    return [
        _spec("csv", {"type": "csv", "path": "csv/*.csv", "blocksize": "16KiB", "provenance": True},
              columns={"score": "int64"}, steps=[{"filter": "id != '5'"}]),
        _spec("csv-drop", {"type": "csv", "path": "csv/*.csv", "blocksize": "1MiB"}, on_error="drop"),
        _spec("jsonl-declared", {"type": "jsonl", "path": "jsonl/*.jsonl*", "blocksize": "64KiB"},
              columns={"id": "int64", "user.id": "int64", "tags": "list<string>"},
              steps=[dedupe], extra_fields="drop"),
        _spec("jsonl-inferred", {"type": "jsonl", "path": "jsonl/*.jsonl*", "blocksize": "32KiB",
                                 "provenance": True}),
        _spec("jsonl-keep", {"type": "jsonl", "path": "jsonl/a.jsonl", "blocksize": "1MiB"},
              columns={"id": "int64", "v": "string"}, extra_fields="keep", on_error="drop"),
        _spec("text-regex", {"type": "text", "path": "text/*.log*", "blocksize": "32KiB",
                             "max_record_bytes": "64KiB", "provenance": True},
              parse={"regex": r"^(?P<day>\S+) (?P<clock>\S+) \[(?P<level>[A-Z]+)\] (?P<worker>\S+) .*took=(?P<ms>\d+)ms$"},
              columns={"ms": "int32"}, steps=[{"filter": "level != 'WARN'"}, {"dedupe": {"on": ["day", "clock", "worker"]}}],
              shard={"count": 3, "shuffle": True, "seed": 1, "splits": {"a": 0.5, "b": 0.5}}),
        _spec("text-lines", {"type": "text", "path": "text/*.log*", "blocksize": "8KiB",
                             "max_record_bytes": "64KiB"}),
        _spec("text-json-preset", {"type": "text", "path": "jsonl/a.jsonl", "blocksize": "64KiB"},
              parse={"preset": "json"}, columns={"id": "int64"}, extra_fields="drop"),
        _spec("multiline", {"type": "text", "path": "multi/*.log", "blocksize": "8KiB",
                            "multiline": {"start": r"^\d{4}-\d{2}-\d{2} ", "max_lines": 4}},
              parse={"regex": r"(?s)^(?P<time>\S+ \S+) (?P<level>[A-Z]+) +\[(?P<thread>[^\]]+)\] (?P<logger>\S+) - (?P<message>.*)$"},
              columns={"time": {"type": "timestamp", "format": "%Y-%m-%d %H:%M:%S.%f"}}),
        _spec("parquet", {"type": "parquet", "path": "pq/*.parquet", "blocksize": "64KiB", "provenance": True},
              columns={"when": {"type": "timestamp", "format": "%Y-%m-%d"}}, steps=[{"filter": "x is not None"}]),
        _spec("parquet-drop", {"type": "parquet", "path": "pq/*.parquet"}, columns={"when": {"type": "timestamp", "format": "%Y-%m-%d"}},
              on_error="drop", shard={"count": 2, "shuffle": True, "seed": 3}),
    ]


def _run(spec_or_file, base: Path, overrides=(), scheduler="threads", piece_bytes=None) -> dict:
    import gpuetl
    from gpuetl.backends import get_backend

    backend = get_backend("cpu")
    if piece_bytes is not None:
        backend.piece_bytes = piece_bytes
    try:
        if isinstance(spec_or_file, dict):
            pipeline = gpuetl.Pipeline.from_dict(spec_or_file, base_dir=base, overrides=overrides)
        else:
            pipeline = gpuetl.Pipeline.from_file(spec_or_file, overrides)
        result = pipeline.run(backend=backend, scheduler=scheduler, report=False)
    except gpuetl.GpuetlError as err:
        return {"error": f"{type(err).__name__}: {err}"}
    return {"counts": result.counts, **_outputs(Path(result.out_dir))}


def record(target: Path) -> None:
    got: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "gpuetl.samples", str(work / "data"), "--photos", "20"], check=True,
                       stdout=subprocess.DEVNULL)
        for pipeline in sorted((ROOT / "pipelines").glob("*.yaml")):
            shutil.copy(pipeline, work / pipeline.name)
            over = ["sink.mode=overwrite"]
            got[f"pipeline {pipeline.stem}"] = _run(work / pipeline.name, work, over)
            got[f"pipeline {pipeline.stem} (small pieces, sync)"] = _run(work / pipeline.name, work, over,
                                                                          scheduler="sync", piece_bytes=50_000)
        for name, make in (("csv", _csv_corpus), ("jsonl", _jsonl_corpus), ("text", _text_corpus),
                           ("multi", _multiline_corpus), ("pq", _parquet_corpus)):
            (work / name).mkdir()
            make(work / name)
        for spec in corpus_cases():
            got[f"corpus {spec['name']}"] = _run(spec, work)
            got[f"corpus {spec['name']} (small pieces, sync)"] = _run(spec, work, scheduler="sync",
                                                                       piece_bytes=20_000)
            failing = {**spec, "on_error": "fail"}
            got[f"corpus {spec['name']} (on_error: fail)"] = _run(failing, work, scheduler="sync")
    target.write_text(json.dumps(got, indent=1, sort_keys=True))
    files = sum(len(v.get("files", ())) for v in got.values())
    print(f"{len(got)} runs, {files} files hashed -> {target}")


def compare(a: Path, b: Path) -> int:
    before, after = (_without_run_fields(json.loads(p.read_text())) for p in (a, b))
    problems = [f"{k}: only in {a.name}" for k in before if k not in after]
    problems += [f"{k}: only in {b.name}" for k in after if k not in before]
    for key in sorted(set(before) & set(after)):
        x, y = before[key], after[key]
        for part in sorted(set(x) | set(y)):
            if x.get(part) != y.get(part):
                problems.append(f"{key}: {part} differs")
    files = sum(len(v.get("files", ())) for v in before.values())
    print(f"{len(before)} runs, {files} files compared: " + ("identical" if not problems else f"{len(problems)} differences"))
    for p in problems:
        print("  " + p)
    return 1 if problems else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("record").add_argument("target", type=Path)
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.what == "record":
        record(args.target)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
