#!/usr/bin/env python3
"""Stage the wheels a lent GPU machine needs (gpu/device-needs.txt) in parts it can carry.

The machine (docs/gpu.md, "On a lent GPU") runs CPython 3.12 on manylinux x86-64, has no network
and takes at most 64 MiB of working tree per call, the repository's own files included. This
script, run here (in the repository's root, or through `make gpu-stage`):

1. downloads every line of device-needs.txt for CPython 3.12 / manylinux x86-64 with
   `pip download --no-deps` into .device/wheels (git-ignored; a wheel already there is reused),
   and checks that exactly one wheel of each pinned name and version is there;
2. packs them in one tar and cuts it into parts of at most --part-size bytes (56 MiB, less where
   the tracked tree is so large that a part and the tree would pass 64 MiB), one folder each:
   .device/parts/p00, p01, ...;
3. writes .device/parts/pNN/install.sh into the last part (run on the device: joins the parts,
   checks the tar's SHA-256, installs with `pip install --no-index --no-deps --target
   /tmp/site`) and .device/parts/plan.json (parts, bytes, sha256), which
   `benchmarks/gpu_check.py --plan` turns into the device plan.

Nothing here needs a GPU; it uses only the standard library and pip.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NEEDS = ROOT / "gpu" / "device-needs.txt"
IMAGE = ROOT / "gpu" / "device-image.txt"
CARRY_LIMIT = 64 << 20            # the device tool's working tree per call
PART_SIZE = 56 << 20
DEVICE_PYTHON = "3.12.3"          # the image's plain python3
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_12_x86_64",
             "manylinux2010_x86_64", "manylinux1_x86_64", "manylinux_2_5_x86_64"]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _markers():
    try:
        from packaging.markers import Marker
    except ImportError:                    # pip vendors it
        from pip._vendor.packaging.markers import Marker
    return Marker


def requirements(path: Path, python: str) -> list[tuple[str, str]]:
    """(name, exact version) of each line of a needs/image file that applies to `python`
    (markers evaluated for that version); a bare name gives version ''."""
    Marker = _markers()
    env = {"python_version": ".".join(python.split(".")[:2]), "python_full_version": python}
    out = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate(env):
            continue
        name, _, version = spec.strip().partition("==")
        out.append((normalize(name), version.strip()))
    return out


def wheel_name_version(filename: str) -> tuple[str, str]:
    name, version = filename.split("-")[:2]
    return normalize(name), version


def download(needs: list[tuple[str, str]], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    wanted = {name: version for name, version in needs}
    stale = [p for p in dest.glob("*.whl") if wheel_name_version(p.name) not in wanted.items()]
    for path in stale:                     # a wheel of a pin no longer wanted would travel too
        path.unlink()
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", ".".join(DEVICE_PYTHON.split(".")[:2]), "--implementation", "cp",
           *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest),
           *[f"{n}=={v}" for n, v in needs]]
    if subprocess.run(cmd).returncode:
        download_failed(dest.parent, "pip download of gpu/device-needs.txt for CPython 3.12 failed")
    wheels = sorted(dest.glob("*.whl"))
    got = [wheel_name_version(p.name) for p in wheels]
    missing = sorted(set(wanted.items()) - set(got))
    doubled = sorted({n for n, _ in got if [m for m, _ in got].count(n) > 1})
    if missing or doubled:
        raise SystemExit(f"stage: wheels missing {missing} or doubled {doubled} in {dest}")
    return wheels


DOWNLOAD_FAILED = "download-failed"


def download_failed(folder: Path, why: str):
    """A download that could not be made (no index reachable): marked for CI, which then skips the
    rehearsal with a line, as it skips the gpu_api tier when the RAPIDS extra cannot be installed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DOWNLOAD_FAILED).write_text(why + "\n")
    raise SystemExit(f"stage: {why}")


def tree_bytes() -> int:
    """Bytes of the files that travel with every call (tracked and untracked-not-ignored)."""
    proc = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          cwd=ROOT, capture_output=True, check=True)
    total = 0
    for name in proc.stdout.decode().split("\0"):
        path = ROOT / name
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def part_size_for(tree: int, wanted: int = PART_SIZE, margin: int = 2 << 20) -> int:
    """The largest part that travels with the tree under the carry limit."""
    size = min(wanted, CARRY_LIMIT - tree - margin)
    if size < 1 << 20:
        raise SystemExit(f"stage: the tree ({tree} bytes) leaves no room for a part under 64 MiB")
    return size


INSTALL = """#!/usr/bin/env bash
# Runs on the GPU machine, in the last staging call: joins the parts copied to /tmp/stage by the
# earlier calls and this one, checks the tar, installs into /tmp/site. Source it, from the root:
#   . .device/parts/{last}/install.sh
set -e
mkdir -p /tmp/stage /tmp/whl
cp .device/parts/p*/part* /tmp/stage/
have=$(ls /tmp/stage/part* | wc -l)
if [ "$have" != {parts} ]; then echo "install: $have of {parts} parts in /tmp/stage (a staging call missed?)" >&2; return 1; fi
cat /tmp/stage/part* > /tmp/stage.tar
echo "{sha256}  /tmp/stage.tar" | sha256sum -c --quiet -
tar xf /tmp/stage.tar -C /tmp/whl && rm -f /tmp/stage.tar
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/whl/*.whl
cat > /tmp/site/sitecustomize.py <<'PY'
{sitecustomize}PY
export PYTHONPATH=$PWD:/tmp/site${{PYTHONPATH:+:$PYTHONPATH}}
# what the image has, for the record (device-image.txt lists some without a version)
PYTHONPATH= python3 -m pip list --format=freeze > "${{OUT:-/tmp}}/device-image-seen.txt" 2>/dev/null || true
python3 -c "import cudf, dask_cudf, dask_cuda, kvikio; print('RAPIDS ready: cudf', cudf.__version__, 'kvikio', kvikio.__version__)"
"""


# A folder on PYTHONPATH is not a site folder: its .pth files are not read. numba-cuda's is
# (`_numba_cuda_redirector.pth`: without it `numba.cuda` is numba's own old CUDA target, and cuDF
# fails to import), so the carried folder gets this sitecustomize, which Python imports at start
# from the front of sys.path: it reads the folder's .pth files (addsitedir does not add the folder
# twice, so the carried packages stay in front of the image's).
SITECUSTOMIZE = """import os
import site

site.addsitedir(os.path.dirname(os.path.abspath(__file__)))
"""


def pack(wheels: list[Path], parts_dir: Path, part_size: int) -> dict:
    if parts_dir.exists():
        shutil.rmtree(parts_dir)
    parts_dir.mkdir(parents=True)
    tar_path = parts_dir / "stage.tar"
    with tarfile.open(tar_path, "w", format=tarfile.PAX_FORMAT) as tar:
        for wheel in wheels:
            tar.add(wheel, arcname=wheel.name)
    digest = hashlib.sha256()
    sizes = []
    with open(tar_path, "rb") as src:
        while chunk := src.read(part_size):
            digest.update(chunk)
            folder = parts_dir / f"p{len(sizes):02d}"
            folder.mkdir()
            (folder / f"part{len(sizes):02d}").write_bytes(chunk)
            sizes.append(len(chunk))
    tar_path.unlink()
    last = f"p{len(sizes) - 1:02d}"
    install = parts_dir / last / "install.sh"
    install.write_text(INSTALL.format(last=last, parts=len(sizes), sha256=digest.hexdigest(),
                                      sitecustomize=SITECUSTOMIZE))
    install.chmod(0o755)
    plan = {"parts": [{"folder": f"p{i:02d}", "bytes": n} for i, n in enumerate(sizes)],
            "part_size": part_size, "wheels": len(wheels),
            "wheel_bytes": sum(p.stat().st_size for p in wheels), "sha256": digest.hexdigest(),
            "install": f".device/parts/{last}/install.sh"}
    (parts_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    return plan


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / ".device"), help="the git-ignored staging folder")
    ap.add_argument("--part-size", type=int, default=PART_SIZE, help="bytes a part at most (56 MiB)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    (out / DOWNLOAD_FAILED).unlink(missing_ok=True)
    needs = requirements(NEEDS, DEVICE_PYTHON)
    wheels = download(needs, out / "wheels")
    tree = tree_bytes()
    plan = pack(wheels, out / "parts", part_size_for(tree, args.part_size))
    plan["tree_bytes"] = tree
    (out / "parts" / "plan.json").write_text(json.dumps(plan, indent=2))
    n = len(plan["parts"])
    print(f"stage: {plan['wheels']} wheels, {plan['wheel_bytes'] / 2**20:.0f} MiB, in {n} parts of at most "
          f"{plan['part_size'] / 2**20:.1f} MiB under {out / 'parts'} (the tree adds {tree / 2**20:.1f} MiB a call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
