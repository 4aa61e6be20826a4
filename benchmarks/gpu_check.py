#!/usr/bin/env python
"""The GPU check: everything a lent GPU machine should run, in one call, in priority order.

Each section writes its JSON under --out (default $OUT, else benchmarks/results/gpu_check/) as
soon as it finishes, so a call cut short still reports what it got. A section starts only when
its estimated seconds (estimates(), listed in 00_machine.json) fit in what is left of --budget
(560 s: one 600 s device call); otherwise its JSON says it was skipped:

  01_tests.json         pytest -m gpu tests/ (all of them: backend, parity through sync and the
                        cluster, steps' GPU kernels), with the summary line and the failures
  02_inputs.json        the access logs: one generated file of the smallest size, the larger ones
                        made of whole copies of it; page cache warmed
  03_read.json          KvikIO read bandwidth of the comparison-size file into device memory
                        (best of 3), and which path KvikIO took (GDS or POSIX)
  04_gpu_<size>.json    the access-log job (benchmarks/access_logs.yaml) on the GPU backend, each
                        size on ONE warm LocalCUDACluster (start-up timed on its own), timed from
                        Pipeline.run to its return (_SUCCESS written); rows, GB/s, host bytes per
                        input byte (the manifest's host_transfer), fallbacks, worker peak RSS;
  04_gpu_shuffled_<size> then the smallest size again with 8 shuffled shards on the same cluster:
                        every row through the spill pieces; spill_host_bytes (the ledger's spill
                        copies plus the pieces' bytes KvikIO moved through host bounce buffers,
                        not by GDS; 0 only with GDS: backends/gpu_spill.py)
  05_cpu.json           the same job on the CPU backend on all cores, comparison size
  06_polars.json        polars' scan -> regex -> sink_parquet (bench_access_logs.py's worker)
  07_summary.json       the ratios against the goals (docs/gpu.md)
  08_records.json       JSON lines and CSV through the record readers (gpu_records.py), next to
                        the CPU backend: GB/s, fallbacks, host bytes, same counts
  09_images.json        images: --images photos (500x375 JPEGs, gpuetl.samples) listed --image-copies
                        times (file copies: 100k by default, ~8 GB) through pipelines/images.yaml's work
                        (decode, resize fill 224x224 bicubic, encode JPEG q90, shards; phash left
                        out) on the GPU backend (its images_on_gpu switch on) on ONE warm
                        LocalCUDACluster, after a warm-up run; images/s from Pipeline.run to its
                        return (_SUCCESS written), goal >= 10,000; counts, fallbacks, host bytes
                        (image_host_bytes: the image path's ledger entries; pixels_stayed_on_device:
                        only offsets/sizes, file bytes for nvImageCodec and encoded JPEGs crossed)
  10_loader.json        gpuetl.Loader(device="cuda", output="cupy") over what 04 and 09 wrote: one
                        shuffled epoch of the smallest access-log dataset (status, time; batch 1,024
                        and 65,536; goal >= 20 M rows/s) and --loader-images of the 224x224 JPEG
                        shards decoded by nvImageCodec to uint8 CHW (batch 256; goal >= 10,000
                        images/s); rows/s, images/s, the loader's stats(), the decode fallbacks

    PYTHONPATH=$PWD:/tmp/site python3 benchmarks/gpu_check.py --out $OUT
    python3 benchmarks/gpu_check.py --smoke        # the whole script on the CPU backend, tiny

The staged set needs, besides RAPIDS and the project's own dependencies (Pillow among them), the
image wheels of the gpu extra: nvidia-nvimgcodec-cu13 with nvidia-nvjpeg, and cvcuda-cu13
(benchmarks/README.md, staging); 09_images reports what it found (image_libraries).

--smoke runs every section on the CPU backend at a tiny size with a plain host read for the
bandwidth section, so the script itself is tested in `make test` (tests/backends/test_gpu_check.py)
and cannot fail on first contact with a GPU. It also walks each section's GPU set-up without a
device (00_setup.json: every `gpu` test collected with no error, the read's, the cluster's, the
records' and the images' libraries importable and gpuetl's LocalCUDACluster arguments taken);
`make gpu-rehearsal` runs it in a venv of the device's packages alone. Not imported by the package.

    python3 benchmarks/gpu_check.py --plan .device/parts/plan.json --install-seconds 40

prints the device plan (device_plan(): the staging calls, the install, each section's estimate,
the --budget and --timeout of the check call) for the parts gpu/stage.py wrote.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def size_of(text: str) -> int:
    t = text.strip().upper()
    num = t.rstrip("KMGIB")
    return int(float(num) * UNITS[t[len(num):]])


def label(size: int) -> str:
    for unit, n in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if size >= n:
            return f"{size / n:g}{unit}"
    return f"{size}B"


class Report:
    """Sections written as they finish: <out>/<name>.json; with `single`, every section so far in
    one file, <out>/gpu_check.json, rewritten as each finishes (the device tool brings back at
    most 8 files from $OUT, and the check writes more sections than that)."""

    SINGLE = "gpu_check.json"

    def __init__(self, out: Path, single: bool = False):
        self.out, self.single = out, single
        out.mkdir(parents=True, exist_ok=True)
        self.sections: dict[str, dict] = {}

    def write(self, name: str, data: dict) -> dict:
        self.sections[name] = data
        if self.single:
            tmp = self.out / f".{self.SINGLE}.tmp"
            tmp.write_text(json.dumps(self.sections, indent=2, default=str))
            tmp.replace(self.out / self.SINGLE)
        else:
            (self.out / f"{name}.json").write_text(json.dumps(data, indent=2, default=str))
        status = "ERROR " + str(data["error"]).strip().splitlines()[-1][:120] if "error" in data else "ok"
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {status}", flush=True)
        return data


# ---------------------------------------------------------------------------------- sections

def run_tests(paths: list[str], timeout: int) -> dict:
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rfEs", *paths]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired as err:
        return {"error": f"timed out after {timeout}s", "tail": (err.stdout or b"")[-6000:]}
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    # pytest exits 5 when every test was deselected or skipped away: not a failure of the script
    return {"ok": proc.returncode in (0, 5), "returncode": proc.returncode, "command": " ".join(cmd[1:]),
            "summary": lines[-1] if lines else proc.stderr[-500:], "seconds": round(time.perf_counter() - started, 1),
            "tail": "\n".join(lines[-60:])}


def make_inputs(data: Path, sizes: list[int]) -> dict[int, Path]:
    """The smallest size is generated (gpuetl.samples); each larger one is whole copies of it,
    so generation costs one small file's time. Page cache warmed."""
    from gpuetl.samples import write_access_logs

    data.mkdir(parents=True, exist_ok=True)
    base_size = min(sizes)
    base = data / f"access-{label(base_size)}.log"
    if not base.exists():
        write_access_logs(base, target_bytes=base_size, seed=0)
    out = {base_size: base}
    for size in sorted(set(sizes) - {base_size}):
        path = data / f"access-{label(size)}.log"
        copies = max(1, round(size / base_size))
        if not path.exists() or path.stat().st_size != copies * base.stat().st_size:
            with open(path, "wb") as dst:
                for _ in range(copies):
                    with open(base, "rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 24)
        out[size] = path
    for path in out.values():
        with open(path, "rb") as fh:
            while fh.read(1 << 26):
                pass
    return out


def read_bandwidth(src: Path, device: bool, repeats: int = 3) -> dict:
    """KvikIO into device memory (GDS or its POSIX path, as KvikIO decides); on --smoke a plain
    host read of the same file, labelled as such."""
    size = src.stat().st_size
    best = None
    if device:
        import cupy as cp
        import kvikio

        chunk = min(size, 1 << 30)
        buf = cp.empty(chunk, dtype=cp.uint8)
        monitor = kvikio.SummaryMonitor()
        before = monitor.get()
        with kvikio.CuFile(str(src), "r") as fh:
            for _ in range(repeats):
                cp.cuda.runtime.deviceSynchronize()
                t0 = time.perf_counter()
                pos = 0
                while pos < size:
                    n = min(chunk, size - pos)
                    fh.pread(buf[:n], n, pos).get()
                    pos += n
                cp.cuda.runtime.deviceSynchronize()
                best = min(best or 1e30, time.perf_counter() - t0)
        paths = {k: v["bytes_transferred"] for k, v in monitor.since(before).by_backend.items() if v["bytes_transferred"]}
        how = f"kvikio {paths}"
    else:
        buf = bytearray(min(size, 1 << 26))
        for _ in range(repeats):
            t0 = time.perf_counter()
            with open(src, "rb", buffering=0) as fh:
                while fh.readinto(buf):
                    pass
            best = min(best or 1e30, time.perf_counter() - t0)
        how = "host read (smoke: no device)"
    return {"bytes": size, "seconds": best, "gbps": size / best / 1e9, "path": how}


SHUFFLE = ["shard.count=8", "shard.shuffle=true", "shard.seed=1"]


def job_series(backend: str, files: list[tuple[int, Path]], out_root: Path, report: Report, prefix: str,
               smoke: bool, shuffled: bool = False) -> list[dict]:
    """The access-log job at each size on one warm cluster; a JSON per size as it finishes.
    shuffled: then the smallest size again with 8 shuffled shards (<prefix>_shuffled_<size>):
    every row goes through the spill pieces (on a GPU: device frames in Parquet files, which
    should put no spill bytes in the host-transfer ledger)."""
    import resource

    from distributed import Client, LocalCluster

    from gpuetl import Pipeline
    from gpuetl.backends import get_backend

    chosen = get_backend(backend)
    t0 = time.perf_counter()
    if smoke:
        cluster_cm = LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
    elif backend == "gpu":
        cluster_cm = chosen.local_cluster()
    else:
        cluster_cm = LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1, processes=True,
                                  dashboard_address=None)
    results = []
    with cluster_cm as cluster, Client(cluster) as client:
        client.run(lambda: None)
        start_seconds = time.perf_counter() - t0
        runs = [(size, src, []) for size, src in files]
        if shuffled:
            runs.append((*min(files), SHUFFLE))
        for size, src, extra in runs:
            name = f"{prefix}_{'shuffled_' if extra else ''}{label(size)}"
            try:
                pipeline = Pipeline.from_file(HERE / "access_logs.yaml", overrides=[
                    f"source.path={src}", f"sink.path={out_root / name}", "sink.mode=overwrite", *extra])
                started = time.perf_counter()
                result = pipeline.run(backend=backend, client=client)
                seconds = time.perf_counter() - started
                rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
                entry = {"backend": backend, "input_bytes": src.stat().st_size, "seconds": seconds,
                         "gbps": src.stat().st_size / seconds / 1e9, "cluster_start_seconds": start_seconds,
                         "workers": len(rss), "worker_peak_rss": max(rss.values()), "counts": result.counts,
                         "fallbacks": result.manifest.get("fallbacks", {}),
                         "host_transfer": result.manifest.get("host_transfer", {}),
                         "io": result.manifest.get("io"), "versions": result.manifest.get("versions"),
                         "shards": [(s["path"], s["rows"], s["sha256"]) for s in result.shards]}
                if extra:
                    moved = entry["host_transfer"].get("by_reason", {})
                    reads = entry["host_transfer"].get("reads", {})
                    # gpuetl's own copies of spill data, and the pieces' bytes that KvikIO did not
                    # move by GDS (its POSIX path goes through host bounce buffers)
                    entry["spill_host_bytes"] = (
                        sum(n for r, n in moved.items() if r.startswith(("spill", "to_arrow")))
                        + sum(v["bytes"] for p, v in reads.items()
                              if p.startswith("spill pieces") and not p.endswith("gds")))
            except Exception as err:       # noqa: BLE001 (reported, and the next size still runs)
                entry = {"error": f"{type(err).__name__}: {err}"}
            results.append(report.write(name, entry))
    return results


def polars_job(src: Path, out: Path, timeout: int) -> dict:
    cmd = [sys.executable, str(HERE / "bench_access_logs.py"), "--worker", "polars", "--input", str(src),
           "--output", str(out)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout}s"}
    seconds = time.perf_counter() - started
    if proc.returncode:
        return {"error": proc.stderr[-3000:] or f"exit {proc.returncode}"}
    return {"input_bytes": src.stat().st_size, "seconds": seconds, "gbps": src.stat().st_size / seconds / 1e9,
            "note": "wall time of the process, start-up included"}


RECORD_COLUMNS = {"ts": "timestamp", "user_id": "int64", "event": "string", "page": "string",
                  "duration_ms": "float64", "ok": "bool"}


def records_job(backend: str, data: Path, out_root: Path, size: int) -> dict:
    """JSON lines and CSV through the backend's record readers (on a GPU: gpu_records.py, libcudf's
    JSON and CSV readers), app events with a declared schema, `scheduler="sync"`, next to the CPU
    backend on the same files: seconds, GB/s, the fallbacks (records the device could not decide)
    and the host bytes, and whether both give the same counts."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pj

    from gpuetl import Pipeline
    from gpuetl.samples import write_app_events

    data.mkdir(parents=True, exist_ok=True)
    jsonl, clean, csv_path = (data / f"events_{label(size)}.jsonl", data / f"clean_{label(size)}.jsonl",
                              data / f"events_{label(size)}.csv")
    lines = max(1000, size // 110)
    if not jsonl.exists():
        write_app_events(jsonl, lines=lines, bad_every=997)
    if not csv_path.exists():
        write_app_events(clean, lines=lines)
        table = pj.read_json(clean)
        pcsv.write_csv(table.select([c for c in RECORD_COLUMNS if c in table.column_names]), csv_path)
        clean.unlink()
    jobs = {"jsonl": ({"type": "jsonl", "path": str(jsonl)}, RECORD_COLUMNS),
            "csv": ({"type": "csv", "path": str(csv_path)}, RECORD_COLUMNS)}
    out: dict = {}
    for name, (source, columns) in jobs.items():
        for which in dict.fromkeys([backend, "cpu"]):
            spec = {"version": 1, "name": f"records-{name}", "source": source, "columns": columns,
                    "sink": {"path": str(out_root / f"records_{name}_{which}"), "mode": "overwrite"}}
            try:
                started = time.perf_counter()
                result = Pipeline.from_dict(spec).run(backend=which, scheduler="sync")
                seconds = time.perf_counter() - started
                nbytes = Path(source["path"]).stat().st_size
                out[f"{name}_{which}"] = {"input_bytes": nbytes, "seconds": seconds, "gbps": nbytes / seconds / 1e9,
                                          "counts": result.counts, "fallbacks": result.manifest.get("fallbacks", {}),
                                          "host_transfer": result.manifest.get("host_transfer", {})}
            except Exception as err:       # noqa: BLE001 (reported; the other jobs still run)
                out[f"{name}_{which}"] = {"error": f"{type(err).__name__}: {err}"}
        mine, cpu = out.get(f"{name}_{backend}", {}), out.get(f"{name}_cpu", {})
        if "counts" in mine and "counts" in cpu:
            out[f"{name}_same_counts_as_cpu"] = mine["counts"] == cpu["counts"]
    return out


LOADER_IMAGES = 20_000        # images the loader's image epoch decodes at most (10_loader)
IMAGES_GOAL = 10_000          # images/s on the GPU backend (issue: H200, warm cluster, >= 100k images)


def _write_photos(args) -> None:
    """One chunk of the generated set (a worker process of make_photos)."""
    from gpuetl.samples import write_images

    folder, start, stop, size = args
    write_images(folder, stop - start, size=size, start=start)


def make_photos(data: Path, n: int, copies: int, size: tuple[int, int]) -> tuple[Path, Path, int]:
    """(the listing of n generated photos `copies` times, a warm-up listing, bytes of one copy).
    Generated once on all cores; each copy is a folder of copies of the files (its own keys, the
    same bytes; not links, which the source reads once). Page cache warmed."""
    from multiprocessing import Pool

    base = data / f"photos-{n}-{size[0]}x{size[1]}"
    if not (base / ".done").exists():
        shutil.rmtree(base, ignore_errors=True)
        with Pool(os.cpu_count()) as pool:
            pool.map(_write_photos, [(str(base), i, min(i + 200, n), size) for i in range(0, n, 200)])
        (base / ".done").write_text("")
    files = sorted(base.rglob("*.jpg"))
    listing, warm = data / f"photos-{n}x{copies}", data / f"photos-{n}-warmup"
    for root, count, subset in ((listing, copies, files), (warm, 1, files[:200])):
        if not (root / ".done").exists():
            shutil.rmtree(root, ignore_errors=True)
            for k in range(count):
                for src in subset:
                    dst = root / f"copy{k}" / src.parent.name / src.name
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
            (root / ".done").write_text("")
    for path in listing.rglob("*.jpg"):
        path.read_bytes()
    return listing, warm, sum(p.stat().st_size for p in files)


def images_spec(root: Path, out: Path) -> dict:
    """pipelines/images.yaml's work on `root`: its steps but phash (the issue's benchmark: read,
    decode, resize fill 224x224, encode JPEG q90, Parquet), its shard layout and sink settings."""
    import yaml

    spec = yaml.safe_load((ROOT / "pipelines" / "images.yaml").read_text())
    spec["source"]["path"] = f"{root}/**/*.jpg"
    spec["steps"] = [step for step in spec["steps"] if "phash" not in step]
    spec["sink"].update(path=str(out), mode="overwrite")
    return spec


def image_libraries() -> dict:
    """The versions of the GPU image libraries here, and whether nvJPEG's library is found (where
    nvImageCodec's nvjpeg extension looks: the nvidia-nvjpeg wheel's nvidia/cu13/lib)."""
    import importlib.util

    out = {}
    for name in ("nvidia.nvimgcodec", "cvcuda"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception as err:           # noqa: BLE001 (not staged, or no GPU for cvcuda)
            out[name] = f"not usable ({type(err).__name__}: {err})"
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
    out["libnvjpeg"] = [str(p) for root in roots for p in Path(root).glob("cu13/lib/libnvjpeg.so*")]
    return out


def images_job(data: Path, out_root: Path, n: int, copies: int, smoke: bool) -> dict:
    """The images benchmark on one warm cluster: a warm-up run (worker imports, nvImageCodec's and
    CV-CUDA's first calls), then the timed run of n x copies images."""
    from distributed import Client, LocalCluster

    from gpuetl import Pipeline
    from gpuetl.backends import get_backend

    started = time.perf_counter()
    listing, warm, copy_bytes = make_photos(data, n, copies, (96, 72) if smoke else (500, 375))
    generate_seconds = time.perf_counter() - started
    backend = get_backend("cpu" if smoke else "gpu")
    if not smoke:
        backend.images_on_gpu = True                     # the GPU image path, not yet checked on a GPU
    t0 = time.perf_counter()
    cluster_cm = (LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None)
                  if smoke else backend.local_cluster())
    with cluster_cm as cluster, Client(cluster) as client:
        client.run(lambda: None)
        start_seconds = time.perf_counter() - t0
        t1 = time.perf_counter()
        Pipeline.from_dict(images_spec(warm, out_root / "images-warmup")).run(backend=backend, client=client,
                                                                              report=False)
        warmup_seconds = time.perf_counter() - t1
        pipeline = Pipeline.from_dict(images_spec(listing, out_root / "images"))
        t2 = time.perf_counter()
        result = pipeline.run(backend=backend, client=client, report=False)
        seconds = time.perf_counter() - t2
    images = result.counts["rows_in"]
    fallbacks = result.manifest.get("fallbacks", {})
    by_reason = result.manifest.get("host_transfer", {}).get("by_reason", {})
    image_bytes = {reason: n for reason, n in by_reason.items() if reason.startswith("images:")}
    return {"backend": backend.name, "image_libraries": image_libraries(), "all_on_device": not fallbacks, "images": images, "copies": copies, "generated": n,
            "input_bytes": copy_bytes * copies, "seconds": seconds, "images_per_s": images / seconds,
            "goal_images_per_s": IMAGES_GOAL, "meets_goal": images / seconds >= IMAGES_GOAL,
            "generate_seconds": generate_seconds, "cluster_start_seconds": start_seconds,
            "warmup_seconds": warmup_seconds, "counts": result.counts,
            "fallbacks": fallbacks, "host_transfer": result.manifest.get("host_transfer", {}),
            "image_host_bytes": image_bytes, "pixels_stayed_on_device": pixels_stayed_on_device(image_bytes),
            "shards": len(result.shards), "versions": result.manifest.get("versions")}


LOADER_ROWS_GOAL, LOADER_IMAGES_GOAL = 20_000_000, 10_000      # per H200 (issue: the loader's CUDA path)


def loader_job(datasets: Path, tabular: str, images_limit: int, smoke: bool) -> dict:
    """gpuetl.Loader's epochs on the device (device="cuda", output="cupy"; on --smoke the CPU
    path, numpy): the access-log dataset `tabular` (04's output) at two batch sizes, then the
    first `images_limit` images of 09's dataset decoded to uint8 CHW. Each timed from iter() to
    the last batch, the device synchronised; the first batch's wait reported on its own."""
    import gpuetl
    from gpuetl.backends.gpu_tallies import fallback_counts, reset_tallies

    device, output = ("cpu", "numpy") if smoke else ("cuda", "cupy")

    def sync():
        if not smoke:
            import cupy as cp

            cp.cuda.Device().synchronize()

    out: dict = {"device": device, "output": output, "goal_rows_per_s": LOADER_ROWS_GOAL,
                 "goal_images_per_s": LOADER_IMAGES_GOAL}
    root = datasets / tabular
    for batch in (1024, 65_536):
        try:
            loader = gpuetl.Loader(root, split=None, columns=["status", "time"], batch_size=batch, seed=0,
                                   drop_last=False, prefetch=4, num_workers=4, device=device, output=output)
            t0, rows = time.perf_counter(), 0
            for b in loader:
                rows += len(b["status"])
            sync()
            seconds = time.perf_counter() - t0
            out[f"tabular_batch_{batch}"] = {"rows": rows, "split_rows": loader.rows, "seconds": seconds,
                                             "rows_per_s": rows / seconds,
                                             "meets_goal": rows / seconds >= LOADER_ROWS_GOAL, "stats": loader.stats()}
        except Exception as err:           # noqa: BLE001 (reported; the image epoch still runs)
            out[f"tabular_batch_{batch}"] = {"error": f"{type(err).__name__}: {err}"}
    images = datasets / "images"
    if not (images / "_SUCCESS").exists():
        out["images"] = {"skipped": f"no image dataset at {images} (09_images did not finish)"}
        return out
    try:
        reset_tallies()
        loader = gpuetl.Loader(images, split="train", columns=["image"], batch_size=256, seed=0, drop_last=False,
                               decode_images="chw", prefetch=4, num_workers=4, device=device, output=output)
        t0, n, shape = time.perf_counter(), 0, None
        for b in loader:
            n += len(b["image"])
            shape = tuple(b["image"].shape[1:])
            if n >= images_limit:
                break
        sync()
        seconds = time.perf_counter() - t0
        n, decoded = min(n, loader.rows), n         # the padding of a last batch (drop_last=False) not counted
        out["images"] = {"images": n, "decoded": decoded, "seconds": seconds, "images_per_s": n / seconds,
                         "shape_chw": shape,
                         "meets_goal": n / seconds >= LOADER_IMAGES_GOAL, "fallbacks": fallback_counts(),
                         "stats": loader.stats()}
    except Exception as err:               # noqa: BLE001
        out["images"] = {"error": f"{type(err).__name__}: {err}"}
    return out


def pixels_stayed_on_device(image_bytes: dict[str, int]) -> bool:
    """The GPU image path's ledger entries are only the rows' offsets and sizes, file bytes
    nvImageCodec reads from host memory (none when decode follows the source, which keeps them on
    the host) and the encoded JPEG bytes (backends/gpu_images.py): no step copied pixels out. True
    on the CPU backend (no ledger)."""
    from gpuetl.backends import gpu_images

    return set(image_bytes) <= {gpu_images.SENT_CONTROL, gpu_images.SENT_FILE_BYTES, gpu_images.SENT_ENCODED}


def _importable(name: str) -> str:
    """'ok', 'MISSING: ...' (not installed: would fail on the device too) or 'needs a device: ...'
    (installed, but its import wants a driver this machine does not have)."""
    import importlib

    try:
        importlib.import_module(name)
        return "ok"
    except ModuleNotFoundError as err:
        return f"MISSING: {err}"
    except Exception as err:               # noqa: BLE001 (no CUDA driver here)
        return f"needs a device: {type(err).__name__}: {str(err)[:160]}"


def setups(tests: str, strict: bool) -> dict:
    """What each section builds before it touches a device, walked on the CPU (--smoke): the test
    section's collection of every `gpu` test (zero errors: a module that fails to import makes
    pytest run nothing), the read section's and the cluster's libraries and arguments, the
    records' and images' modules. An entry 'MISSING ...' or an error fails the smoke run;
    'needs a device' is what this machine cannot show. A missing package fails only when
    `strict` (--strict-setup: the environment claims to hold the device's packages, as the
    rehearsal's venv does); elsewhere RAPIDS is simply not installed."""
    import inspect

    out: dict = {"01_tests": {"skipped": "--tests ''"}}
    if tests:
        cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "gpu",
               *tests.split()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
        last = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or [proc.stderr[-300:]]
        collected = {"returncode": proc.returncode, "summary": last[0],
                     "errors": [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]}
        if proc.returncode or collected["errors"]:
            collected["error"] = f"collecting the gpu tests failed: {last[0]}"
        out["01_tests"] = collected
    out["03_read"] = {name: _importable(name) for name in ("cupy", "kvikio")}
    if out["03_read"]["kvikio"] == "ok":
        import kvikio

        out["03_read"]["calls"] = {name: hasattr(kvikio, name) for name in ("CuFile", "SummaryMonitor")}
        if not all(out["03_read"]["calls"].values()):
            out["03_read"]["error"] = f"kvikio lacks {out['03_read']['calls']}"
    cluster: dict = {"dask_cuda": _importable("dask_cuda"), "gpuetl.backends.gpu": _importable("gpuetl.backends.gpu")}
    if cluster["dask_cuda"] == "ok":
        from dask_cuda import LocalCUDACluster

        from gpuetl.backends.gpu_detect import cluster_settings

        settings = cluster_settings([(141 << 30, 143 << 30)])       # an H200's (free, total)
        try:
            inspect.signature(LocalCUDACluster).bind(**settings, CUDA_VISIBLE_DEVICES="0",
                                                     dashboard_address="127.0.0.1:0", silence_logs=40)
            cluster["LocalCUDACluster"] = {k: str(v) for k, v in settings.items()}
        except TypeError as err:
            cluster["error"] = f"LocalCUDACluster does not take gpuetl's settings: {err}"
    out["04_gpu"] = cluster
    out["08_records"] = {name: _importable(name) for name in ("gpuetl.backends.gpu_records", "gpuetl.backends.gpu_spill")}
    out["09_images"] = {name: _importable(name) for name in ("nvidia.nvimgcodec", "cvcuda", "simplejpeg",
                                                              "gpuetl.backends.gpu_images")}
    out["10_loader"] = {name: _importable(name) for name in ("cupy", "pylibcudf", "nvidia.nvimgcodec",
                                                              "gpuetl.backends.gpu_loader")}
    if out["10_loader"]["gpuetl.backends.gpu_loader"] == "ok" and out["10_loader"]["pylibcudf"] == "ok":
        from gpuetl.backends import gpu_loader

        def reaches(dotted: str) -> bool:
            import importlib

            parts = dotted.split(".")
            obj = importlib.import_module(parts[0])
            for k, name in enumerate(parts[1:], start=2):
                obj = getattr(obj, name) if hasattr(obj, name) else importlib.import_module(".".join(parts[:k]))
            return obj is not None

        unreached = []
        for dotted in [c[0] for c in gpu_loader.LOADER_CALLS] + gpu_loader.LOADER_CONSTANTS:
            try:
                reaches(dotted)
            except (AttributeError, ImportError):
                unreached.append(dotted)
        out["10_loader"]["calls"] = len(gpu_loader.LOADER_CALLS) - len(unreached)
        if unreached:
            out["10_loader"]["error"] = f"the loader's device calls do not resolve: {unreached}"
    for name, entry in out.items():
        missing = [k for k, v in entry.items() if isinstance(v, str) and v.startswith("MISSING")]
        if missing and strict and "error" not in entry:
            entry["error"] = f"not installed: {missing}"
    return out


def machine() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        from gpuetl.backends.gpu_detect import gpu_memory

        import pynvml

        pynvml.nvmlInit()
        info["gpus"] = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
                        for i in range(pynvml.nvmlDeviceGetCount())]
        info["gpu_memory"] = gpu_memory()
        pynvml.nvmlShutdown()
    except Exception as err:       # noqa: BLE001 (no NVML: a CPU machine, the smoke run)
        info["gpus"] = f"none seen ({type(err).__name__})"
    return info


def summary(r: Report, compare: int) -> dict:
    s = r.sections
    gpu = s.get(f"04_gpu_{label(compare)}", {})
    cpu, pol, read = s.get("05_cpu", {}), s.get("06_polars", {}), s.get("03_read", {})
    out: dict = {"goals": {"gpu_gbps": 10.0, "gpu_vs_cpu": 10.0, "gpu_vs_read": 0.5, "host_bytes_per_input_byte": 0.01}}
    if "gbps" in gpu:
        out["gpu_gbps"] = gpu["gbps"]
        out["host_bytes_per_input_byte"] = gpu["host_transfer"].get("host_bytes_per_input_byte")
        out["syncs_per_partition"] = gpu["host_transfer"].get("syncs_per_partition")   # the sync budget (docs/gpu.md)
        if "gbps" in cpu:
            out["gpu_vs_cpu"] = gpu["gbps"] / cpu["gbps"]
        if "gbps" in pol:
            out["gpu_vs_polars"] = gpu["gbps"] / pol["gbps"]
        if "gbps" in read:
            out["gpu_vs_read"] = gpu["gbps"] / read["gbps"]
    rss = {k.split("_", 2)[2]: v["worker_peak_rss"] for k, v in s.items()
           if k.startswith("04_gpu_") and "shuffled" not in k and "worker_peak_rss" in v}
    out["worker_peak_rss_by_size"] = rss
    shuffled = [v for k, v in s.items() if k.startswith("04_gpu_shuffled_") and "gbps" in v]
    if shuffled:
        out["shuffled_gbps"] = shuffled[0]["gbps"]
        out["shuffled_spill_host_bytes"] = shuffled[0]["spill_host_bytes"]      # 0 only where KvikIO uses GDS
    if "gbps" in gpu and "shards" in cpu:
        out["same_rows_as_cpu"] = [x[1] for x in gpu["shards"]] == [x[1] for x in cpu["shards"]]
    out["tests"] = s.get("01_tests", {}).get("summary")
    return out


GB = 1e9


def estimates(sizes: list[int], compare: int, records: int, images: int, copies: int, tests_timeout: int) -> dict:
    """Device-machine seconds each section should take at these sizes, pessimistic (rates well
    under the goals; benchmarks/README.md gives the reasoning). A section starts only when its
    estimate fits in what is left of --budget; otherwise its JSON says it was skipped."""
    big = sorted(set(sizes) | {compare})
    return {
        "01_tests": tests_timeout,
        "02_inputs": 30 * min(big) / GB + sum(big[1:]) / GB + 5,        # generate ~30 s/GB, copy ~1 GB/s
        "03_read": 3 * compare / (2 * GB) + 2,
        "04_gpu": 25 + sum(sizes) / GB + 2 * min(sizes) / GB,         # cluster start, >= 1 GB/s, the shuffled run
        "05_cpu": 10 + compare / (0.5 * GB),                           # 16 cores at ~30 MB/s each
        "06_polars": 5 + compare / (0.5 * GB),
        "08_records": 15 + 2 * records / 10e6 + 2 * records / 20e6,   # 2 CPU runs ~10 MB/s, generated ~20 MB/s
        "09_images": (20 + images * copies / 2000 + images / 1000) if images else 0,   # warm-up, >= 2,000 images/s
        # the loader's epochs over 04's smallest output (~4.5 M rows/GB of logs, two batch sizes at
        # >= 2 M rows/s) and up to 20,000 of 09's images at >= 2,000 images/s, start-up 5 s
        "10_loader": 5 + 2 * 4.5 * min(sizes) / GB / 2 + min(images * copies, LOADER_IMAGES) / 2000,
    }


# ------------------------------------------------------------------------------- device plan
# The lent machine's limits (docs/gpu.md, "On a lent GPU"): 15 minutes of device time in all, the
# whole run planned to fit in 12 of them; one call runs at most 600 s and carries at most 64 MiB.
# MACHINE_START and CALL_OVERHEAD are ESTIMATES (no machine has been lent yet): a fresh machine
# starts in "a minute or more"; a call's overhead is sending the tree and a 56 MiB part (~64 MiB)
# and starting its command. Replace them with what the first lent machine shows.
DEVICE_SECONDS = 15 * 60
PLAN_SECONDS = 12 * 60
CALL_LIMIT = 600
CALL_MARGIN = 30              # kept back in the check call: the install's own variance, the JSON
MACHINE_START = 60            # estimate
CALL_OVERHEAD = 15            # estimate, per call
MIN_TESTS_TIMEOUT = 60
SECTION_ORDER = ["01_tests", "02_inputs", "03_read", "04_gpu", "05_cpu", "06_polars", "08_records", "09_images",
                 "10_loader"]


def device_plan(parts: int, install_seconds: float, sections: dict[str, float],
                start: float = MACHINE_START, per_call: float = CALL_OVERHEAD) -> dict:
    """The device run as calls: one staging call per part (the machine's start in the first),
    the last part's call installing and then running this script with --budget set from what is
    left, in that call and in PLAN_SECONDS. The test section's --timeout is what the other
    sections leave of the budget (at least MIN_TESTS_TIMEOUT); sections that then do not fit,
    last first, are listed as skipped. `sections` holds estimates() of the run, 01_tests
    included (its value is replaced by the chosen timeout)."""
    staging = start + parts * per_call                     # every call carries one part
    before_check = staging + install_seconds
    budget = int(min(CALL_LIMIT - CALL_MARGIN - per_call - install_seconds, PLAN_SECONDS - before_check))
    others = {k: v for k, v in sections.items() if k != "01_tests"}
    timeout = int(max(MIN_TESTS_TIMEOUT, min(sections.get("01_tests", 240), budget - sum(others.values()))))
    planned, used, skipped = {"01_tests": timeout}, timeout, []
    for name in SECTION_ORDER[1:]:
        if name not in others:
            continue
        if used + others[name] <= budget:
            planned[name] = others[name]
            used += others[name]
        else:
            skipped.append(name)
    total = before_check + used
    return {"parts": parts, "staging_seconds": staging, "install_seconds": install_seconds,
            "check_budget": budget, "tests_timeout": timeout, "sections": planned, "skipped": skipped,
            "check_seconds": used, "total_seconds": total, "plan_seconds": PLAN_SECONDS,
            "fits": budget > 0 and total <= PLAN_SECONDS and not skipped,
            "estimated": {"machine_start": start, "per_call": per_call}}


def last_call_command(last: str, plan: dict) -> str:
    """The check call: install, then this script with --budget set from what the install left."""
    cap = plan["check_budget"] + int(plan["install_seconds"])
    return (f"t0=$SECONDS; . .device/parts/{last}/install.sh && PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py "
            f"--out $OUT --single-file --budget $(({cap} - (SECONDS - t0))) --timeout {plan['tests_timeout']}")


def print_plan(staged: dict, install_seconds: float | None) -> dict:
    parts = len(staged["parts"])
    install = install_seconds if install_seconds is not None else 60.0
    sections = estimates([size_of(x) for x in "1GB,4GB,8GB".split(",")], size_of("4GB"), size_of("128MB"),
                         10_000, 10, 240)
    plan = device_plan(parts, install, sections)
    last = staged["parts"][-1]["folder"]
    mib = staged["wheel_bytes"] / 2**20
    lines = ["", "DEVICE PLAN (15 min of device time; this plan must fit in 12)",
             f"  staging   {parts} calls x {plan['estimated']['per_call']:.0f} s + machine start "
             f"{plan['estimated']['machine_start']:.0f} s = {plan['staging_seconds']:.0f} s "
             f"(ESTIMATES: no machine lent yet; {mib:.0f} MiB of wheels in parts of "
             f"{staged['part_size'] / 2**20:.1f} MiB, back to back: an idle machine goes back after ~30 s)"]
    for part in staged["parts"][:-1]:
        lines.append(f"    run(carry=['.device/parts/{part['folder']}'], command='mkdir -p /tmp/stage && "
                     f"cp .device/parts/{part['folder']}/part* /tmp/stage/')")
    lines.append(f"  install   {plan['install_seconds']:.0f} s "
                 + ("(measured here: install.sh's join, SHA-256 check, unpack and pip install --no-deps --target of the parts)"
                    if install_seconds is not None else "(ESTIMATE: not measured here)"))
    lines.append(f"  check     --budget {plan['check_budget']} s (what is left after the install, in the call "
                 f"and in the 12 minutes), --timeout {plan['tests_timeout']} s for the tests:")
    for name, seconds in plan["sections"].items():
        lines.append(f"    {name:<11} {seconds:6.0f} s")
    for name in plan["skipped"]:
        lines.append(f"    {name:<11} skipped: does not fit")
    lines.append(f"    run(carry=['.device/parts/{last}'], timeout_s={CALL_LIMIT}, command="
                 f"'{last_call_command(last, plan)}')")
    lines.append(f"  total     {plan['total_seconds']:.0f} s of {PLAN_SECONDS} s: "
                 + ("FITS" if plan["fits"] else "DOES NOT FIT"))
    print("\n".join(lines), flush=True)
    return plan


class Budget:
    """What is left of --budget seconds, from the start of the script."""

    def __init__(self, seconds: float, report: Report):
        self.seconds, self.report, self.t0 = seconds, report, time.perf_counter()

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)

    def fits(self, name: str, estimate: float) -> bool:
        if estimate <= self.left():
            return True
        self.report.write(name, {"skipped": f"needs about {estimate:.0f} s; {self.left():.0f} s of --budget left"})
        return False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1GB,4GB,8GB", help="GPU backend sizes, one warm cluster")
    ap.add_argument("--compare-size", default="4GB", help="size for the CPU backend, polars and the read")
    ap.add_argument("--data", default="/tmp/gpuetl-check")
    ap.add_argument("--out", default=None)
    ap.add_argument("--tests", default="tests/", help="what `pytest -m gpu` runs ('' to skip)")
    ap.add_argument("--timeout", type=int, default=240,
                    help="at most this many seconds for the test section (less where the GPU job would not fit)")
    ap.add_argument("--budget", type=int, default=560,
                    help="seconds for the whole script (the device tool allows 600 s a call): a section whose "
                         "estimate does not fit in what is left is skipped, saying so in its JSON")
    ap.add_argument("--smoke", action="store_true", help="CPU backend, tiny sizes: checks the script itself")
    ap.add_argument("--records-size", default="128MB", help="JSON lines and CSV files for the record readers' section")
    ap.add_argument("--images", type=int, default=10_000, help="photos generated for 09_images (0: skip it)")
    ap.add_argument("--image-copies", type=int, default=10, help="times the photos are listed (09_images)")
    ap.add_argument("--single-file", action="store_true",
                    help="every section in <out>/gpu_check.json (the device call: at most 8 files come back)")
    ap.add_argument("--strict-setup", action="store_true",
                    help="with --smoke: a package a section's GPU set-up imports must be installed (the rehearsal)")
    ap.add_argument("--plan", default=None, metavar="PLAN_JSON",
                    help="print the device plan for the parts gpu/stage.py wrote (.device/parts/plan.json) and exit")
    ap.add_argument("--install-seconds", type=float, default=None, help="the install's seconds, for --plan")
    args = ap.parse_args(argv)

    if args.plan:
        plan = print_plan(json.loads(Path(args.plan).read_text()), args.install_seconds)
        return 0 if plan["fits"] else 1
    backend = "cpu" if args.smoke else "gpu"
    if args.smoke:
        sizes, compare, records = [100_000, 200_000], 200_000, 100_000
        n_images, copies = (12, 2) if args.images else (0, 0)
    else:
        sizes, compare = [size_of(x) for x in args.sizes.split(",") if x], size_of(args.compare_size)
        records, n_images, copies = size_of(args.records_size), args.images, args.image_copies
    out = Path(args.out or os.environ.get("OUT") or HERE / "results" / "gpu_check")
    report = Report(out, single=args.single_file)
    budget = Budget(args.budget, report)
    plan = estimates(sizes, compare, records, n_images, copies, args.timeout)
    report.write("00_machine", {**machine(), "backend": backend, "sizes": sizes, "compare_size": compare,
                                "smoke": args.smoke, "budget_seconds": args.budget, "estimated_seconds": plan})
    setup_ok = True
    if args.smoke:
        walked = setups(args.tests, args.strict_setup)
        report.write("00_setup", {**walked, **({"error": "; ".join(f"{k}: {v['error']}" for k, v in walked.items()
                                                                   if "error" in v)}
                                               if any("error" in v for v in walked.values()) else {})})
        setup_ok = not any("error" in v for v in walked.values())
    # smoke: the section's code runs, on one small module (the whole suite is `make test`'s job)
    tests = "tests/backends/test_gpu_rules.py" if args.smoke and args.tests == "tests/" else args.tests
    if tests:
        # the tests first, but never so long that the GPU job (02-04) no longer fits after them
        after = plan["02_inputs"] + plan["03_read"] + plan["04_gpu"]
        report.write("01_tests", run_tests(tests.split(), max(30, int(min(args.timeout, budget.left() - after)))))
    if not budget.fits("02_inputs", plan["02_inputs"]):
        return 1
    try:
        files = make_inputs(Path(args.data), [*sizes, compare])
        report.write("02_inputs", {label(k): {"path": str(v), "bytes": v.stat().st_size} for k, v in files.items()})
    except Exception as err:               # noqa: BLE001
        report.write("02_inputs", {"error": f"{type(err).__name__}: {err}"})
        return 1
    if budget.fits("03_read", plan["03_read"]):
        try:
            report.write("03_read", read_bandwidth(files[compare], device=not args.smoke))
        except Exception as err:           # noqa: BLE001
            report.write("03_read", {"error": f"{type(err).__name__}: {err}"})
    out_root = Path(args.data) / "out"
    if budget.fits("04_gpu", plan["04_gpu"]):
        try:
            job_series(backend, [(s, files[s]) for s in sizes], out_root, report, "04_gpu", args.smoke, shuffled=True)
        except Exception as err:           # noqa: BLE001 (the cluster did not start)
            report.write("04_gpu", {"error": f"{type(err).__name__}: {err}"})
    if budget.fits("05_cpu", plan["05_cpu"]):
        try:
            report.write("05_cpu", job_series("cpu", [(compare, files[compare])], out_root, report, "05_cpu_run",
                                              args.smoke)[0])
        except Exception as err:           # noqa: BLE001
            report.write("05_cpu", {"error": f"{type(err).__name__}: {err}"})
    if budget.fits("06_polars", plan["06_polars"]):
        report.write("06_polars", polars_job(files[compare], out_root / "polars",
                                             timeout=max(10, int(budget.left()))))
    result = report.write("07_summary", summary(report, compare))
    print(json.dumps(result, indent=2, default=str))
    if budget.fits("08_records", plan["08_records"]):
        try:
            report.write("08_records", records_job(backend, Path(args.data), out_root, records))
        except Exception as err:           # noqa: BLE001
            report.write("08_records", {"error": f"{type(err).__name__}: {err}"})
    tests_ok = report.sections.get("01_tests", {}).get("ok", True)
    images_ok = True
    if n_images and budget.fits("09_images", plan["09_images"]):
        try:
            images = report.write("09_images", images_job(Path(args.data), out_root, n_images, copies, args.smoke))
            print(json.dumps({k: images[k] for k in ("images", "seconds", "images_per_s", "meets_goal",
                                                     "pixels_stayed_on_device")}, default=str))
        except Exception as err:           # noqa: BLE001 (reported in its JSON)
            report.write("09_images", {"error": f"{type(err).__name__}: {err}"})
            images_ok = False
    loader_ok = True
    if budget.fits("10_loader", plan["10_loader"]):
        try:
            done = report.write("10_loader", loader_job(out_root, f"04_gpu_{label(min(sizes))}",
                                                        min(n_images * copies, LOADER_IMAGES), args.smoke))
            loader_ok = not any("error" in v for v in done.values() if isinstance(v, dict))
        except Exception as err:           # noqa: BLE001 (reported in its JSON)
            report.write("10_loader", {"error": f"{type(err).__name__}: {err}"})
            loader_ok = False
    return 0 if setup_ok and tests_ok and images_ok and loader_ok and "gpu_gbps" in result else 1


if __name__ == "__main__":
    sys.exit(main())
