#!/usr/bin/env python
"""Side-by-side benchmark: a folder of JPEGs -> decode -> resize fill 224x224 -> JPEG q90 -> Parquet.

    python benchmarks/bench_images.py [--imagenet 10000] [--large 2000] [--cores N] [--rounds 3]
        [--draft-baseline] [--fixed-cost] [--data benchmarks/data] [--json benchmarks/results/images.json]

Two sets, generated once (cached by count, size and a hash of gpuetl/samples.py) with
``gpuetl.samples.write_images``: ImageNet-sized photos (500x375) and large ones (1024x768).
On each, in alternating rounds (A B, then B A, ...), each run in a fresh subprocess on the same
cores:

- ``gpuetl-cpu``: pipelines/images.yaml's work (labels from the parent folder, decode RGB,
  resize fill 224x224 bicubic, encode JPEG q90) run by ``gpuetl`` on the CPU backend;
- ``pillow-mp``: a plain script: multiprocessing.Pool(cores) over the files, each worker
  opens, converts to RGB, resizes (short side to 224, bicubic) and centre-crops, encodes JPEG
  q90; the parent writes key, label, image to Parquet with pyarrow;
- ``pillow-mp-draft`` (``--draft-baseline``): the same script with ``Image.draft("RGB",
  (224, 224))`` before the convert, as Pillow's docs offer for JPEGs (1/2, 1/4, 1/8 scale).

Reports, per run, wall seconds (process start to the last byte written), images/s and the CPU
seconds its processes used (user + system; on a machine others share the wall time follows
their load, the CPU time much less), with the load average just before; per set, the medians
over the rounds and the ratios (gpuetl over the plain script). ``--fixed-cost`` also times a
run on the first 20 images, for a "steady" rate without each system's fixed cost. The page cache
is warmed by reading every file first. Not a test; nothing here is imported by the package.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))        # this checkout's gpuetl, also in the generator's workers
SETS = {"imagenet": (500, 375), "large": (1024, 768)}

PILLOW_SCRIPT = r'''
import io, os, sys, time
from multiprocessing import Pool
import pyarrow as pa, pyarrow.parquet as pq
from PIL import Image

DRAFT = False

def work(path):
    img = Image.open(path)
    if DRAFT:
        img.draft("RGB", (224, 224))
    img = img.convert("RGB")
    w, h = img.size
    s = 224 / min(w, h)
    img = img.resize((max(224, round(w * s)), max(224, round(h * s))), Image.Resampling.BICUBIC)
    left, top = (img.width - 224) // 2, (img.height - 224) // 2
    buf = io.BytesIO()
    img.crop((left, top, left + 224, top + 224)).save(buf, "JPEG", quality=90)
    return buf.getvalue()

if __name__ == "__main__":
    root, out, cores = sys.argv[1], sys.argv[2], int(sys.argv[3])
    DRAFT = len(sys.argv) > 4 and sys.argv[4] == "draft"
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
    with Pool(cores) as pool:
        images = pool.map(work, paths, chunksize=16)
    keys = [os.path.relpath(p, root) for p in paths]
    table = pa.table({"key": keys, "label": [k.split(os.sep)[0] for k in keys], "image": pa.array(images, pa.binary())})
    pq.write_table(table, out, compression="none")
'''

GPUETL_SCRIPT = r'''
import sys
from gpuetl.api import Pipeline
root, out, cores = sys.argv[1], sys.argv[2], int(sys.argv[3])
spec = {"version": 1, "name": "bench-images",
        "source": {"type": "images", "path": root + "/**/*.jpg", "label": "parent", "blocksize": "16MiB"},
        "steps": [{"decode": {"mode": "RGB"}}, {"resize": {"size": [224, 224], "mode": "fill", "filter": "bicubic"}},
                  {"encode": {"format": "jpeg", "quality": 90}}],
        "sink": {"path": out, "compression": "none", "mode": "overwrite"}}
result = Pipeline.from_dict(spec).run(backend="cpu")      # a thread per core, as `gpuetl run` does
assert result.counts["rows_out"] == result.counts["rows_in"], result.counts
'''


def _dataset(data: Path, name: str, n: int, cores: int) -> Path:
    from multiprocessing import Pool

    version = hashlib.sha256((ROOT / "gpuetl" / "samples.py").read_bytes()).hexdigest()[:8]
    w, h = SETS[name]
    folder = data / f"images-{name}-{w}x{h}-{n}-{version}"
    if not (folder / ".done").exists():
        print(f"generating {n} images of {w}x{h} in {folder} ...", flush=True)
        chunks = [(str(folder), i, min(i + 250, n), (w, h)) for i in range(0, n, 250)]
        with Pool(cores) as pool:
            pool.map(_write_chunk, chunks)
        (folder / ".done").write_text("")
    return folder


def _write_chunk(args) -> None:
    from gpuetl.samples import write_images

    folder, start, stop, size = args
    write_images(folder, stop - start, size=size, start=start)


FEW = 20     # a run on this many images measures each system's fixed cost (start, imports, cluster)


def _first(folder: Path, files: list[Path], n: int) -> Path:
    """A copy of the first n images (copies, not links: a link out of the folder is not read)."""
    few = folder.with_name(folder.name + f"-first{n}")
    if not few.exists():
        for p in files[:n]:
            (few / p.parent.name).mkdir(parents=True, exist_ok=True)
            (few / p.parent.name / p.name).write_bytes(p.read_bytes())
    return few


def _run(script: str, root: Path, out: Path, cores: int, *extra: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and its children). On a machine
    others share, the wall time varies with their load; the CPU time much less."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # -P: this checkout's gpuetl (PYTHONPATH), not one in the current folder
    subprocess.run([sys.executable, "-P", "-c", script, str(root), str(out), str(cores), *extra], check=True,
                   env=env, preexec_fn=lambda: os.sched_setaffinity(0, range(cores)))     # all on the same cores
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


SYSTEMS = {"pillow-mp": (PILLOW_SCRIPT, ()), "gpuetl-cpu": (GPUETL_SCRIPT, ()),
           "pillow-mp-draft": (PILLOW_SCRIPT, ("draft",))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--imagenet", type=int, default=10_000, help="images of 500x375 (0: skip)")
    ap.add_argument("--large", type=int, default=2_000, help="images of 1024x768 (0: skip)")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds (A B, B A, ...) on each set")
    ap.add_argument("--draft-baseline", action="store_true", help="also run the plain script with Image.draft")
    ap.add_argument("--fixed-cost", action="store_true", help="also time a run on the first 20 images")
    ap.add_argument("--data", type=Path, default=HERE / "data")
    ap.add_argument("--json", type=Path, default=HERE / "results" / "images.json")
    args = ap.parse_args()
    systems = ["pillow-mp", "gpuetl-cpu"] + (["pillow-mp-draft"] if args.draft_baseline else [])
    results = []
    for name, n in (("imagenet", args.imagenet), ("large", args.large)):
        if not n:
            continue
        folder = _dataset(args.data, name, n, args.cores)
        files = sorted(folder.rglob("*.jpg"))
        total = sum(len(p.read_bytes()) for p in files)            # also warms the page cache
        row = {"set": name, "images": len(files), "mean_kb": round(total / len(files) / 1000, 1),
               "cores": args.cores, "runs": []}
        out = args.json.parent / f"images-out-{name}"
        out.mkdir(parents=True, exist_ok=True)
        few = _first(folder, files, FEW) if args.fixed_cost else None
        for r in range(args.rounds):
            for system in (systems if r % 2 == 0 else systems[::-1]):
                script, extra = SYSTEMS[system]
                target = out / (system + ("" if system == "gpuetl-cpu" else ".parquet"))
                run = {"round": r + 1, "system": system, "load_1min": round(os.getloadavg()[0], 2)}
                if few is not None:
                    run["seconds_few"], run["cpu_seconds_few"] = _run(script, few, target, args.cores, *extra)
                seconds, cpu = _run(script, folder, target, args.cores, *extra)
                run.update(seconds=round(seconds, 2), images_per_s=round(len(files) / seconds, 1),
                           cpu_seconds=round(cpu, 2), cpu_ms_per_image=round(1000 * cpu / len(files), 2))
                if few is not None:
                    run["steady_images_per_s"] = round((len(files) - FEW) / max(seconds - run["seconds_few"], 1e-9), 1)
                row["runs"].append(run)
                print(f"{name:9s} {len(files):6d} round {r + 1} {system:16s} load {run['load_1min']:5.1f}  "
                      f"{run['seconds']:7.1f} s  {run['images_per_s']:7.1f} images/s  CPU {run['cpu_seconds']:6.1f} s"
                      f"  ({run['cpu_ms_per_image']:.2f} ms/image)", flush=True)
        for system in systems:
            runs = [x for x in row["runs"] if x["system"] == system]
            row[system] = {k: statistics.median(x[k] for x in runs) for k in ("images_per_s", "cpu_seconds")}
        for base in [s for s in systems if s != "gpuetl-cpu"]:
            rounds = range(1, args.rounds + 1)
            by = {(x["round"], x["system"]): x for x in row["runs"]}
            row[f"ratio_images_per_s_vs_{base}"] = [
                round(by[r, "gpuetl-cpu"]["images_per_s"] / by[r, base]["images_per_s"], 2) for r in rounds]
            row[f"ratio_cpu_vs_{base}"] = [round(by[r, base]["cpu_seconds"] / by[r, "gpuetl-cpu"]["cpu_seconds"], 2)
                                           for r in rounds]
            print(f"{name:9s} gpuetl-cpu vs {base}: images/s ratio per round {row[f'ratio_images_per_s_vs_{base}']}"
                  f", CPU-seconds ratio ({base} / gpuetl) per round {row[f'ratio_cpu_vs_{base}']}", flush=True)
        results.append(row)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
