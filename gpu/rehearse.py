#!/usr/bin/env python3
"""The device run rehearsed on this machine (`make gpu-rehearsal`; docs/gpu.md, "Rehearsing").

A lent GPU machine has its image (gpu/device-image.txt) and what we carry (gpu/device-needs.txt),
nothing else. This script builds a venv from ONLY those two files (.venv-rehearsal, Python 3.11
unless --python says otherwise; the device runs 3.12, whose wheels gpu/stage.py stages), with the
wheels downloaded first into .device/rehearsal-<tag> (pip's cache makes a second download
cheap) and installed with `pip install --no-index` from there, and then, with
RAPIDS_NO_INITIALIZE=1 and the repository on PYTHONPATH as on the device:

1. checks the venv holds nothing the two files do not name (`pip check`, and no package pulled
   in that neither file lists). The layout is the device's: the image's packages in the venv,
   the needs installed over them with `--no-deps --target .venv-rehearsal/site`, which is put
   in front on PYTHONPATH as install.sh puts /tmp/site;
2. imports every gpuetl module;
3. collects every `gpu`-marked test: zero collection errors;
4. runs the `gpu_api` tier;
5. plans every pipeline in pipelines/ for the GPU (`gpuetl plan --backend gpu`: no device);
6. runs `benchmarks/gpu_check.py --smoke` (every section on the CPU, and each section's GPU
   set-up walked: 00_setup.json);
7. prints the device plan (`benchmarks/gpu_check.py --plan`) from the staged parts
   (.device/parts/plan.json, gpu/stage.py) and the install measured here.

Exits non-zero at the first step that fails, naming it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEEDS = ROOT / "gpu" / "device-needs.txt"
IMAGE = ROOT / "gpu" / "device-image.txt"
sys.path.insert(0, str(ROOT / "gpu"))
from stage import PLATFORMS, SITECUSTOMIZE, download_failed, normalize, requirements  # noqa: E402  (gpu/ is scripts, not a package)


def run(step: str, cmd: list[str], env: dict | None = None, timings: dict | None = None,
        check=lambda proc: proc.returncode == 0) -> subprocess.CompletedProcess:
    print(f"rehearsal: {step} ...", flush=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if timings is not None:
        timings[step] = seconds
    if not check(proc):
        sys.stdout.write(proc.stdout[-6000:])
        sys.stderr.write(proc.stderr[-6000:])
        raise SystemExit(f"rehearsal FAILED at: {step} (exit {proc.returncode}; `{' '.join(cmd)}`)")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    print(f"rehearsal: {step}: ok in {seconds:.1f} s" + (f" ({lines[-1][:150]})" if lines else ""), flush=True)
    return proc


def stamp_of(python: str) -> str:
    return hashlib.sha256(NEEDS.read_bytes() + IMAGE.read_bytes() + python.encode() + b"overlay").hexdigest()


def build(python: str, venv: Path, timings: dict) -> Path:
    """The venv from the two files alone; rebuilt when either file changes."""
    py = venv / "bin" / "python"
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    tag = "cp" + "".join(version.split(".")[:2])
    wheels = ROOT / ".device" / f"rehearsal-{tag}"
    stamp = venv / ".rehearsal-stamp"
    if py.exists() and stamp.exists() and stamp.read_text() == stamp_of(version):
        print(f"rehearsal: {venv.name} is up to date with the needs and image files (Python {version})")
        return py
    run("venv", [python, "-m", "venv", "--clear", str(venv)], timings=timings)
    files = ["-r", str(NEEDS), "-r", str(IMAGE)]
    try:
        run("download (pip's cache reused)", [str(py), "-m", "pip", "download", "-q", "--only-binary=:all:",
                                              "-d", str(wheels), *files], timings=timings)
    except SystemExit as err:
        download_failed(ROOT / ".device", f"the rehearsal's download failed: {err}")
    # as on the device: the image's packages in the interpreter's site-packages, what is carried
    # installed over them with --no-deps --target and put in front on PYTHONPATH (install.sh)
    run("install the image's packages --no-index", [str(py), "-m", "pip", "install", "-q", "--no-index",
                                                    "--find-links", str(wheels), "-r", str(IMAGE)], timings=timings)
    run("install the needs --no-index --no-deps --target", [
        str(py), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--find-links", str(wheels),
        "--target", str(overlay(venv)), "-r", str(NEEDS)], timings=timings)
    (overlay(venv) / "sitecustomize.py").write_text(SITECUSTOMIZE)        # as install.sh writes it
    stamp.write_text(stamp_of(version))
    return py


def overlay(venv: Path) -> Path:
    """The rehearsal's /tmp/site: the carried wheels, in front of the image's packages."""
    return venv / "site"


def device_env(py: Path) -> dict:
    env = {**os.environ, "RAPIDS_NO_INITIALIZE": "1", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": f"{ROOT}:{overlay(py.parent.parent)}"}
    env.pop("VIRTUAL_ENV", None)
    return env


def closed(py: Path, timings: dict) -> None:
    """Nothing in the venv that the two files do not name, and every requirement met."""
    version = subprocess.run([str(py), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    listed = {name for path in (NEEDS, IMAGE) for name, _ in requirements(path, version)}
    tools = {"pip", "setuptools", "wheel"}
    env = device_env(py)
    freeze = run("pip list", [str(py), "-m", "pip", "list", "--format=freeze"], env, timings).stdout
    # gpuetl itself travels as the tree on PYTHONPATH, not as a wheel; pip lists it wherever an
    # editable install left its metadata (gpuetl.egg-info) in the checkout, as `make test` does
    have = {normalize(line.split("==")[0]) for line in freeze.splitlines() if "==" in line} - {"gpuetl"}
    extra, missing = sorted(have - listed - tools), sorted(listed - have - tools)
    if extra or missing:
        raise SystemExit(f"rehearsal FAILED: the venv holds {extra} that neither gpu/device-needs.txt nor "
                         f"gpu/device-image.txt names, and lacks {missing}")
    run("pip check", [str(py), "-m", "pip", "check"], env, timings)


IMPORT_ALL = """
import importlib, pkgutil, gpuetl
names = sorted(m.name for m in pkgutil.walk_packages(gpuetl.__path__, "gpuetl.") if not m.name.endswith(".__main__"))
for name in names:
    importlib.import_module(name)
print(f"imported {len(names)} gpuetl modules from {gpuetl.__file__}")
"""


PLAN_IMAGES = """
import sys
from gpuetl import Pipeline
from gpuetl.backends import get_backend
backend = get_backend("gpu", for_planning=True)
backend.images_on_gpu = True
plan = Pipeline.from_file(sys.argv[1]).plan(backend)
print(f"planned {sys.argv[1]} for the GPU, images_on_gpu: {len(plan.files)} files")
"""


def no_collection_errors(proc: subprocess.CompletedProcess) -> bool:
    text = proc.stdout + proc.stderr
    return proc.returncode == 0 and not re.search(r"\berrors?\b", text.splitlines()[-1] if text.strip() else "") \
        and "ERROR collecting" not in text


def checks(py: Path, timings: dict) -> None:
    env = device_env(py)
    run("import every gpuetl module", [str(py), "-c", IMPORT_ALL], env, timings)
    run("collect the gpu tests", [str(py), "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                  "-m", "gpu", "tests"], env, timings, check=no_collection_errors)
    run("the gpu_api tier", [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu_api", "tests"],
        env, timings)
    if not (ROOT / "pipelines" / "data").exists():
        run("sample data", [str(py), "-m", "gpuetl.samples", "pipelines/data", "--photos", "8"], env, timings)
    for pipeline in sorted((ROOT / "pipelines").glob("*.yaml")):
        images = "type: images" in pipeline.read_text()
        if not images:
            run(f"plan {pipeline.name} for the GPU", [str(py), "-m", "gpuetl", "plan", "--backend", "gpu",
                                                      str(pipeline.relative_to(ROOT))], env, timings)
            continue
        # an images source runs on the GPU only with the backend's images_on_gpu switch on (the CLI
        # refuses, saying so); plan it as gpu_check.py's 09_images runs it, switch on
        run(f"plan {pipeline.name} for the GPU (images_on_gpu)", [str(py), "-c", PLAN_IMAGES,
                                                                  str(pipeline.relative_to(ROOT))], env, timings)
    smoke = ROOT / ".device" / "rehearsal-smoke"
    run("gpu_check.py --smoke", [str(py), "benchmarks/gpu_check.py", "--smoke", "--strict-setup", "--out", str(smoke / "out"),
                                 "--data", str(smoke / "data")], env, timings)


def measure_install(python: str, timings: dict) -> float | None:
    """Seconds the device's install (install.sh: --no-index --no-deps --target) takes here, for
    the staged wheels, where this Python can install them (pip installs any wheel with --target
    when told its platform; the device's are cp312)."""
    parts = sorted((ROOT / ".device" / "parts").glob("p*/part*"))
    if not parts:
        return None
    target = ROOT / ".device" / "install-measure"
    subprocess.run(["rm", "-rf", str(target)], check=True)
    (target / "whl").mkdir(parents=True)
    started = time.perf_counter()
    # install.sh's join, check and unpack, then its pip install
    digest = hashlib.sha256()
    with open(target / "stage.tar", "wb") as joined:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            joined.write(data)
    staged = json.loads((ROOT / ".device" / "parts" / "plan.json").read_text())
    if digest.hexdigest() != staged["sha256"]:
        raise SystemExit("rehearsal FAILED: the staged parts do not join to the tar stage.py packed")
    subprocess.run(["tar", "xf", str(target / "stage.tar"), "-C", str(target / "whl")], check=True)
    (target / "stage.tar").unlink()
    wheels = sorted((target / "whl").glob("*.whl"))
    joined_seconds = time.perf_counter() - started
    cmd = [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
           "--target", str(target / "site"), "--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
           *[a for p in PLATFORMS for a in ("--platform", p)], *map(str, wheels)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    subprocess.run(["rm", "-rf", str(target)], check=True)
    if proc.returncode:
        print(f"rehearsal: the staged install could not be measured here ({proc.stderr.strip()[-300:]})")
        return None
    timings["install the staged wheels (--target)"] = seconds
    print(f"rehearsal: the staged parts install in {seconds:.1f} s here (joined, checked and unpacked in "
          f"{joined_seconds:.1f} s, then pip install --no-deps --target)", flush=True)
    return seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default="python3.11", help="the Python the rehearsal venv is built with")
    ap.add_argument("--venv", default=str(ROOT / ".venv-rehearsal"))
    args = ap.parse_args(argv)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    py = build(args.python, Path(args.venv), timings)
    closed(py, timings)
    checks(py, timings)
    install = measure_install(str(py), timings)
    plan = ROOT / ".device" / "parts" / "plan.json"
    cmd = [str(py), "benchmarks/gpu_check.py", "--plan", str(plan)]
    if install is not None:
        cmd += ["--install-seconds", f"{install:.0f}"]
    print(f"rehearsal: passed in {time.perf_counter() - started:.0f} s; by step (s): "
          + ", ".join(f"{k} {v:.0f}" for k, v in timings.items()), flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


if __name__ == "__main__":
    sys.exit(main())
