"""The device run's files and arithmetic (docs/gpu.md, "On a lent GPU"): what the lent machine
needs beyond its image (gpu/device-needs.txt) and what its image has (gpu/device-image.txt)
cover every import of the GPU path; the staged parts fit a call and join to what was packed; the
device plan fits in 12 of the 15 minutes and gives the check what the install leaves. Fast: no
download, no venv (`make gpu-rehearsal` does those)."""

import ast
import hashlib
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


stage = _load("gpu_stage", ROOT / "gpu" / "stage.py")
check = _load("gpu_check", ROOT / "benchmarks" / "gpu_check.py")

# import name -> distribution, where they differ (the rest: the name with _ as -)
DISTRIBUTION = {"PIL": "pillow", "yaml": "pyyaml", "cupy": "cupy-cuda13x", "cupyx": "cupy-cuda13x",
                "cudf": "cudf-cu13", "pylibcudf": "pylibcudf-cu13", "kvikio": "kvikio-cu13", "rmm": "rmm-cu13",
                "dask_cudf": "dask-cudf-cu13", "pynvml": "nvidia-ml-py", "nvidia": "nvidia-nvimgcodec-cu13",
                "cvcuda": "cvcuda-cu13", "dateutil": "python-dateutil", "_pytest": "pytest"}
# modules of the repository itself that tests import by their top-level name
LOCAL = {"gpuetl", "conftest", "hostile", "imagedata", "objectstore_server", "peak_memory", "textdata",
         "watched_logs", "gallery", "loaderdata", "device_standins", "test_gpu_api",
         "hostile_die_plugin", "output_identity"}


# Extras the device run leaves behind: sink.delta_log's deltalake (imported only when a pipeline
# asks for a Delta log, a located error without it; its tests skip without it). The device
# checks write no Delta log, and its wheel would cost the plan a staging call.
LEFT_BEHIND = {"deltalake"}


def _imports(path: Path, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - LOCAL - {"__future__"}


def _device_packages(python="3.12.3") -> tuple[dict, dict]:
    return (dict(stage.requirements(stage.NEEDS, python)), dict(stage.requirements(stage.IMAGE, python)))


@pytest.mark.slow                      # parses every file of the repository: 2–4 s
def test_every_import_of_the_gpu_path_is_carried_or_on_the_image():
    """gpuetl's every import (the GPU backend's included), gpu_check.py's, and every test module's
    (collecting `-m gpu` imports them all: one missing package and pytest runs nothing; a test's
    own imports run on the device) name a package of one of the two files."""
    needs, image = _device_packages()
    covered = set(needs) | set(image)
    wanted: dict[str, set[str]] = {}
    sources = [(p, False) for p in (ROOT / "gpuetl").rglob("*.py")] + [(ROOT / "benchmarks" / "gpu_check.py", False)]
    sources += [(p, False) for p in (ROOT / "tests").rglob("*.py")]
    for path, top in sources:
        for name in _imports(path, top):
            dist = stage.normalize(DISTRIBUTION.get(name, name))
            wanted.setdefault(dist, set()).add(str(path.relative_to(ROOT)))
    uncovered = {dist: sorted(paths)[:3] for dist, paths in wanted.items() if dist not in covered | LEFT_BEHIND}
    # what is left behind is never imported at a module's top: collecting the gpu tests imports none
    for path, _ in sources:
        assert not {stage.normalize(n) for n in _imports(path, True)} & LEFT_BEHIND, path
    assert not uncovered, f"imported but neither carried (gpu/device-needs.txt) nor on the image: {uncovered}"
    # the time zones: zoneinfo (and cuDF's tz_localize) read tzdata where the image has no zoneinfo folder
    assert "tzdata" in needs and "simplejpeg" in needs


def test_needs_are_exact_pins_and_agree_with_the_gpu_extra():
    needs, image = _device_packages()
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+]*", v) for v in needs.values()), needs
    assert not set(needs) & set(image), "a package both carried and on the image: pick one"
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for line in [*project["dependencies"], *project["optional-dependencies"]["gpu"]]:
        req = Requirement(line.split("#")[0])
        name = stage.normalize(req.name)
        version = needs.get(name) or image.get(name)
        assert name in needs or name in image, f"{name} (pyproject) is neither carried nor on the image"
        if version:
            assert req.specifier.contains(version, prereleases=True), (name, version, str(req.specifier))


def test_the_rehearsal_reads_the_same_files_for_its_python():
    """The rehearsal venv (Python 3.11) installs the same names at the same pins, but for dask's
    backports before 3.12 and the image's torch (its tests skip without it)."""
    device = _device_packages("3.12.3")
    rehearsal = _device_packages("3.11.7")
    assert set(device[1]) - set(rehearsal[1]) == {"torch"}       # the image's, too large to rehearse with
    assert set(rehearsal[1]) <= set(device[1])
    assert set(device[0]) - set(rehearsal[0]) == set()
    assert set(rehearsal[0]) - set(device[0]) <= {"importlib-metadata", "lazy-importer"}   # dask's, before 3.12
    assert {k: v for k, v in device[0].items()} == {k: v for k, v in rehearsal[0].items() if k in device[0]}


def test_parts_fit_a_call_and_join_to_the_packed_wheels(tmp_path):
    wheels = []
    for i, size in enumerate([300_000, 5_000, 700_001]):
        path = tmp_path / "w" / f"pkg{i}-1.0-py3-none-any.whl"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(hashlib.sha256(str(i).encode()).digest() * (size // 32))
        wheels.append(path)
    plan = stage.pack(wheels, tmp_path / "parts", part_size=256 << 10)
    parts = sorted((tmp_path / "parts").glob("p*/part*"))
    assert len(parts) == len(plan["parts"]) > 3 and all(p.stat().st_size <= 256 << 10 for p in parts)
    joined = b"".join(p.read_bytes() for p in parts)
    assert hashlib.sha256(joined).hexdigest() == plan["sha256"]
    install = (tmp_path / "parts" / plan["parts"][-1]["folder"] / "install.sh").read_text()
    assert plan["sha256"] in install and "--no-index --no-deps" in install and f'!= {len(parts)} ]' in install
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(joined)) as tar:
        assert sorted(tar.getnames()) == sorted(w.name for w in wheels)
    # a part and the tree that travels with it stay under the carry limit
    for tree in (0, 3 << 20, 20 << 20):
        assert stage.part_size_for(tree) + tree <= stage.CARRY_LIMIT
    with pytest.raises(SystemExit):
        stage.part_size_for(64 << 20)


def _sections():
    return check.estimates([10**9, 4 * 10**9, 8 * 10**9], 4 * 10**9, 128 * 10**6, 10_000, 10, 240)


def test_the_device_plan_fits_in_twelve_minutes_and_gives_the_check_what_the_install_leaves():
    sections = _sections()
    plan = check.device_plan(14, 60, sections)
    assert plan["staging_seconds"] == check.MACHINE_START + 14 * check.CALL_OVERHEAD
    assert plan["fits"] and not plan["skipped"]
    assert plan["total_seconds"] == plan["staging_seconds"] + 60 + sum(plan["sections"].values())
    assert plan["total_seconds"] <= check.PLAN_SECONDS < check.DEVICE_SECONDS
    assert sum(plan["sections"].values()) <= plan["check_budget"]
    # the check call (its overhead, the install, the budget) stays inside one call's limit
    assert check.CALL_OVERHEAD + 60 + plan["check_budget"] <= check.CALL_LIMIT - check.CALL_MARGIN
    # the tests get what the other sections leave, all other sections planned at their estimate
    others = {k: v for k, v in sections.items() if k != "01_tests"}
    assert plan["sections"] == {"01_tests": plan["tests_timeout"], **others}
    # a slower install leaves the check that much less, second for second
    slower = check.device_plan(14, 90, sections)
    assert slower["check_budget"] == plan["check_budget"] - 30
    command = check.last_call_command("p13", plan)
    assert f"--budget $(({plan['check_budget'] + 60} - (SECONDS - t0)))" in command
    assert command.startswith("t0=$SECONDS; . .device/parts/p13/install.sh && ") and len(command) < 2000
    assert "--single-file" in command        # at most 8 files come back from $OUT


def test_the_check_call_brings_every_section_back_in_one_file(tmp_path):
    """The device tool returns at most 8 files from $OUT; the check writes a dozen sections."""
    report = check.Report(tmp_path, single=True)
    for i in range(12):
        report.write(f"{i:02d}_section", {"n": i})
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_check.json"]
    import json
    assert json.loads((tmp_path / "gpu_check.json").read_text()) == {f"{i:02d}_section": {"n": i} for i in range(12)}


def test_a_plan_that_cannot_fit_says_so_and_names_the_sections_it_skips():
    plan = check.device_plan(30, 60, _sections())
    assert not plan["fits"] and plan["skipped"]
    assert plan["skipped"][-1] == check.SECTION_ORDER[-1] and "02_inputs" not in plan["skipped"]
    assert plan["tests_timeout"] == check.MIN_TESTS_TIMEOUT
    assert plan["staging_seconds"] + 60 + sum(plan["sections"].values()) <= check.PLAN_SECONDS


def test_the_carried_folder_reads_its_pth_files_and_stays_in_front(tmp_path):
    """On the device the carried wheels are a --target folder on PYTHONPATH, where Python reads no
    .pth file; numba-cuda's (`_numba_cuda_redirector.pth`) must be read or cuDF fails to import
    (`numba.cuda.core` missing). install.sh writes stage.SITECUSTOMIZE into the folder, and the
    rehearsal does the same."""
    import os
    import subprocess

    site = tmp_path / "site"
    site.mkdir()
    (site / "marker_hook.pth").write_text("import os; os.environ['GPUETL_PTH_READ'] = '1'\n")
    probe = "import os, sys; print(os.environ.get('GPUETL_PTH_READ'), sys.path.index(%r), sys.path.count(%r))" % (
        str(site), str(site))
    env = {**os.environ, "PYTHONPATH": str(site)}
    env.pop("GPUETL_PTH_READ", None)
    without = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert without.stdout.split()[0] == "None"
    (site / "sitecustomize.py").write_text(stage.SITECUSTOMIZE)
    read, index, count = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                        check=True).stdout.split()
    assert read == "1" and count == "1" and int(index) <= 1       # read, and still in front, once
    wheels = [tmp_path / "w" / "pkg-1.0-py3-none-any.whl"]
    wheels[0].parent.mkdir()
    wheels[0].write_bytes(b"x" * 100)
    plan = stage.pack(wheels, tmp_path / "parts", part_size=1 << 20)
    install = (tmp_path / "parts" / plan["parts"][-1]["folder"] / "install.sh").read_text()
    assert "cat > /tmp/site/sitecustomize.py" in install and stage.SITECUSTOMIZE in install
