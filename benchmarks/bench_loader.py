#!/usr/bin/env python
"""Side-by-side benchmark of gpuetl.Loader (tabular part): one shuffled epoch of an access-log
dataset, batch 1,024, numpy out, shuffle buffer 10,000 rows for everyone.

    python benchmarks/bench_loader.py [--rows 1000000] [--rss-rows 4000000] [--data benchmarks/data]
        [--json benchmarks/results/loader.json] [--only NAME ...]

Makes the dataset once with a gpuetl run (cached by rows under --data), then runs each system in
a fresh interpreter, one after the other, over the same shards (read from the manifest):

- gpuetl: gpuetl.Loader(split="train", batch_size=1024, shuffle_buffer=10_000), numpy output.
- pyarrow-memory: a plain script that reads the whole split into memory, permutes its rows with
  numpy and slices batches (numeric columns to numpy, strings as Arrow arrays, as the Loader does).
- hf-datasets: Hugging Face `datasets` streaming over the same Parquet files, `.shuffle(buffer_size=
  10_000)`, batched by 1,024 (only when `datasets` is installed; it is not a dependency).
- gpuetl-stub-step: the Loader feeding a stub training step (time.sleep per batch, sized so the
  step alone runs at 1.1x the goal throughput); reports the fraction of wall time spent waiting.

Reports rows/s, wall seconds and peak RSS; with --rss-rows, the Loader's peak RSS at that size too.

With --images N (the torch tier: run it with a Python that has torch, .venv-torch/bin/python), the
image part: N photos (gpuetl.samples, 500x375) through pipelines/images.yaml (224x224 JPEG
shards, train/val), then one epoch of the train split decoded to uint8 CHW, batch 256,
--image-workers readers each, alternating for --rounds:
- gpuetl-images: gpuetl.Loader(decode_images="chw", output="torch", num_workers=W);
- torch-pillow: a torch DataLoader (num_workers=W, shuffle, batch 256) over a map-style dataset of
  the same shards' JPEG bytes (read into memory in its constructor, timed), each item decoded by
  Pillow to a CHW uint8 tensor, batches collated by torch.
Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BATCH, BUFFER = 1024, 10_000
COLUMNS = ["ip", "time", "method", "path", "status", "user_agent"]   # `size` holds nulls ('-')


def make_dataset(data: Path, rows: int) -> Path:
    folder = data / f"loader-{rows}"
    if (folder / "out" / "_SUCCESS").exists():
        return folder / "out"
    sys.path.insert(0, str(ROOT))
    from gpuetl import Pipeline
    from gpuetl.samples import write_access_logs

    (folder / "in").mkdir(parents=True, exist_ok=True)
    write_access_logs(folder / "in" / "access.log", lines=rows, seed=0)
    spec = {"version": 1, "name": "loader-bench",
            "source": {"type": "text", "path": "in/*.log", "blocksize": "16MiB"},
            "parse": {"preset": "apache_combined"},
            "columns": {"status": "int16", "size": "int64",
                        "time": {"type": "timestamp", "format": "%d/%b/%Y:%H:%M:%S %z"}},
            "shard": {"count": 16, "splits": {"train": 0.98, "val": 0.02}},
            "sink": {"path": "out", "mode": "overwrite", "row_group_rows": 65536}}
    t = time.perf_counter()
    Pipeline.from_dict(spec, base_dir=folder).run(backend="cpu", scheduler="threads", report=False)
    print(f"dataset of {rows:,} lines made in {time.perf_counter() - t:.1f} s: {folder / 'out'}", flush=True)
    return folder / "out"


# ------------------------------------------------------------------ systems (each in a fresh interpreter)

def run_gpuetl(root: str, step_s: float = 0.0) -> dict:
    import gpuetl

    loader = gpuetl.Loader(root, split="train", columns=COLUMNS, batch_size=BATCH, shuffle_buffer=BUFFER,
                           seed=0, drop_last=False, prefetch=8, num_workers=2)
    rows = 0
    t = time.perf_counter()
    for batch in loader:
        rows += len(batch["status"])
        if step_s:
            time.sleep(step_s)
    wall = time.perf_counter() - t
    stats = loader.stats()
    return {"rows": rows, "seconds": wall, "wait_fraction": stats["wait_s"] / wall,
            "steady_wait_fraction": (stats["wait_s"] - stats["first_wait_s"]) / wall, "stats": stats}


def _train_files(root: str) -> list[str]:
    manifest = json.loads(Path(root, "_manifest.json").read_bytes())
    return [str(Path(root, s["path"])) for s in manifest["shards"] if s["split"] == "train"]


def run_pyarrow_memory(root: str) -> dict:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = time.perf_counter()
    table = pa.concat_tables([pq.read_table(f, columns=COLUMNS) for f in _train_files(root)]).combine_chunks()
    order = np.random.default_rng(0).permutation(table.num_rows)
    rows = 0
    for i in range(0, table.num_rows, BATCH):
        part = table.take(pa.array(order[i:i + BATCH]))
        batch = {}
        for name in COLUMNS:
            col = part.column(name).combine_chunks()
            if pa.types.is_string(col.type):
                batch[name] = col
            elif pa.types.is_timestamp(col.type):
                batch[name] = col.view(pa.int64()).to_numpy().view("datetime64[us]")
            else:
                batch[name] = col.to_numpy()
        rows += len(batch["status"])
    return {"rows": rows, "seconds": time.perf_counter() - t}


def run_hf_datasets(root: str) -> dict:
    import datasets

    t = time.perf_counter()
    ds = datasets.load_dataset("parquet", data_files={"train": _train_files(root)}, split="train", streaming=True)
    ds = ds.select_columns(COLUMNS).shuffle(seed=0, buffer_size=BUFFER).with_format("numpy")
    rows = 0
    for batch in ds.iter(batch_size=BATCH):
        rows += len(batch["status"])
    return {"rows": rows, "seconds": time.perf_counter() - t}


IMAGE_BATCH = 256


def make_image_dataset(data: Path, n: int) -> Path:
    folder = data / f"images-{n}"
    if (folder / "out" / "_SUCCESS").exists():
        return folder / "out"
    sys.path.insert(0, str(ROOT))
    import yaml

    from gpuetl import Pipeline
    from gpuetl.samples import write_images

    t = time.perf_counter()
    if not (folder / "photos" / ".done").exists():
        write_images(folder / "photos", n)
        (folder / "photos" / ".done").write_text("")
    spec = yaml.safe_load((ROOT / "pipelines" / "images.yaml").read_text())
    spec["source"]["path"] = "photos/**/*.jpg"
    spec["sink"].update(path="out", mode="overwrite")
    Pipeline.from_dict(spec, base_dir=folder).run(backend="cpu", report=False)
    print(f"image dataset of {n:,} photos made in {time.perf_counter() - t:.1f} s: {folder / 'out'}", flush=True)
    return folder / "out"


def run_gpuetl_images(root: str, workers: int) -> dict:
    import torch  # noqa: F401  (before the clock, as in torch-pillow: a training script has it loaded)

    import gpuetl

    loader = gpuetl.Loader(root, split="train", columns=["image", "label_id"], batch_size=IMAGE_BATCH, seed=0,
                           drop_last=False, decode_images="chw", output="torch", num_workers=workers, prefetch=4)
    n = 0
    t = time.perf_counter()
    for batch in loader:
        n += len(batch["image"])
    seconds = time.perf_counter() - t
    # images of the split (drop_last=False pads the last batch: those decodes are not counted)
    return {"rows": loader.rows, "decoded": n, "seconds": seconds, "shape": list(batch["image"].shape[1:]),
            "stats": loader.stats()}


class PillowImages:
    """The same shards' JPEG bytes and labels, a map-style dataset decoding one item with Pillow."""

    def __init__(self, root: str):
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.concat_tables([pq.read_table(f, columns=["image", "label_id"]) for f in _train_files(root)])
        self.images, self.labels = table.column("image").to_pylist(), table.column("label_id").to_pylist()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        import io

        import numpy as np
        import torch
        from PIL import Image

        pixels = np.asarray(Image.open(io.BytesIO(self.images[i])).convert("RGB"))
        return torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1))), self.labels[i]


def run_torch_pillow(root: str, workers: int) -> dict:
    import torch
    from torch.utils.data import DataLoader

    t = time.perf_counter()
    loader = DataLoader(PillowImages(root), batch_size=IMAGE_BATCH, shuffle=True, num_workers=workers,
                        generator=torch.Generator().manual_seed(0))
    n = 0
    for images, _ in loader:
        n += len(images)
    return {"rows": n, "seconds": time.perf_counter() - t, "shape": list(images.shape[1:])}


def child(name: str, root: str, step_s: float) -> None:
    sys.path.insert(0, str(ROOT))
    import pyarrow as pa

    pa.table({"a": [1]}).take([0])           # pyarrow's lazy imports (pandas among them) before any clock starts
    fn = {"gpuetl": run_gpuetl, "pyarrow-memory": run_pyarrow_memory, "hf-datasets": run_hf_datasets,
          "gpuetl-stub-step": lambda r: run_gpuetl(r, step_s),
          "gpuetl-images": lambda r: run_gpuetl_images(r, int(step_s)),
          "torch-pillow": lambda r: run_torch_pillow(r, int(step_s))}[name]
    result = fn(root)
    result["peak_rss_mb"] = _own_peak_rss_kb() / 1024
    print("RESULT " + json.dumps(result))


def _own_peak_rss_kb() -> float:
    """This process's peak RSS since its exec: /proc's VmHWM. Not ru_maxrss, which on Linux keeps
    the peak of the process image exec replaced, here the parent's (a vfork'd child shares its
    memory until exec): a parent that had just made the dataset lent every child its own peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def run_child(name: str, root: Path, step_s: float = 0.0) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", name, str(root), str(step_s)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["rows_per_s"] = r["rows"] / r["seconds"]
            return r
    return {"error": (proc.stderr or proc.stdout)[-2000:]}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rss-rows", type=int, default=0, help="also the Loader's peak RSS at this many rows")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--images", type=int, default=0, help="the image part at this many photos (torch tier)")
    ap.add_argument("--image-workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of the image part (alternating)")
    ap.add_argument("--stub-rounds", type=int, default=1, help="rounds of the stub step")
    args = ap.parse_args()
    if args.images:
        images_part(args)
        return
    root = make_dataset(args.data, args.rows)
    names = ["gpuetl", "pyarrow-memory"]
    try:
        import datasets  # noqa: F401

        names.append("hf-datasets")
    except ImportError:
        print("hf-datasets: skipped (`datasets` is not installed; it is not a dependency)")
    names = [n for n in names if not args.only or n in args.only]
    results = {}
    for name in names:
        results[name] = r = run_child(name, root)
        print(f"{name:16s} " + (f"{r['rows']:>9,} rows  {r['seconds']:6.2f} s  {r['rows_per_s']:>12,.0f} rows/s  "
                                 f"peak RSS {r['peak_rss_mb']:,.0f} MB" if "rows" in r
                                 else "FAILED " + r["error"]), flush=True)
    ok = {n: r for n, r in results.items() if "rows" in r}
    if "gpuetl" in ok and (not args.only or "gpuetl-stub-step" in args.only or args.only == ["gpuetl"]):
        goal = max(10 * ok["hf-datasets"]["rows_per_s"] if "hf-datasets" in ok else 600_000,
                   ok["pyarrow-memory"]["rows_per_s"] / 2 if "pyarrow-memory" in ok else 0)
        step_s = BATCH / (1.1 * goal)
        for k in range(args.stub_rounds):
            r = results[f"gpuetl-stub-step-{k + 1}"] = run_child("gpuetl-stub-step", root, step_s)
            if "rows" in r:
                print(f"gpuetl-stub-step round {k + 1}: step {step_s * 1e3:.2f} ms per batch (goal {goal:,.0f} "
                      f"rows/s): {r['rows_per_s']:,.0f} rows/s, waited {100 * r['wait_fraction']:.1f}% of the wall "
                      f"time ({100 * r['steady_wait_fraction']:.1f}% after the first batch, first batch "
                      f"{1e3 * r['stats']['first_wait_s']:.0f} ms), load {os.getloadavg()[0]:.1f}", flush=True)
            else:
                print("gpuetl-stub-step FAILED " + r["error"])
    if "gpuetl" in ok and "pyarrow-memory" in ok:
        print(f"gpuetl / pyarrow-memory: {ok['gpuetl']['rows_per_s'] / ok['pyarrow-memory']['rows_per_s']:.2f}x")
    if "gpuetl" in ok and "hf-datasets" in ok:
        print(f"gpuetl / hf-datasets: {ok['gpuetl']['rows_per_s'] / ok['hf-datasets']['rows_per_s']:.1f}x")
    if args.rss_rows:
        big = make_dataset(args.data, args.rss_rows)
        for name in ("gpuetl", "pyarrow-memory"):
            if name in ok:
                r = results[f"{name}@{args.rss_rows}"] = run_child(name, big)
                print(f"{name} at {args.rss_rows:,} rows: peak RSS {r.get('peak_rss_mb', 0):,.0f} MB "
                      f"(at {args.rows:,}: {ok[name]['peak_rss_mb']:,.0f} MB), {r.get('rows_per_s', 0):,.0f} rows/s")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def images_part(args) -> None:
    root = make_image_dataset(args.data, args.images)
    results: dict = {}
    for k in range(args.rounds):
        for name in ("gpuetl-images", "torch-pillow"):
            r = results[f"{name}-{k + 1}"] = run_child(name, root, args.image_workers)
            print(f"round {k + 1} {name:14s} " + (
                f"{r['rows']:>7,} images {r['seconds']:6.2f} s {r['rows_per_s']:>8,.0f} images/s  "
                f"{r['shape']}  load {os.getloadavg()[0]:.1f}" if "rows" in r else "FAILED " + r["error"]), flush=True)
        a, b = results[f"gpuetl-images-{k + 1}"], results[f"torch-pillow-{k + 1}"]
        if "rows" in a and "rows" in b:
            print(f"round {k + 1} gpuetl / torch-pillow: {a['rows_per_s'] / b['rows_per_s']:.2f}x", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
