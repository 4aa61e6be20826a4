# Two entry points (see README): `make demo` and `make test` (`make test-fast` skips the tests marked slow). Everything is installed into .venv.
PYTHON ?= python3
# Python writes its bytecode caches (__pycache__/, git-ignored) even where the environment says not
# to: the suite's two workers and its few hundred subprocesses import gpuetl and the test modules,
# and without the caches each compiles them again and pytest rewrites every test module's asserts
# again (collecting took 8.3 s a worker, 2.8 s with them; `make test-fast` 118 s, 104 s).
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-images test test-fast browser venv sample-data bench bench-images clean gpu-api gpu-api-venv test-torch torch-venv bench-loader

$(BIN)/gpuetl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/gpuetl

sample-data: venv
	$(BIN)/python -m gpuetl.samples pipelines/data --photos 200

demo: sample-data
	$(BIN)/gpuetl run pipelines/access_logs.yaml --set sink.mode=overwrite

demo-images: sample-data
	$(BIN)/gpuetl run pipelines/images.yaml --set sink.mode=overwrite

# The browser tests (tests/runtime/test_browser.py) draw the run report and the /gpuetl page in
# headless Chromium, installed from Debian's packages where this user may (root with apt-get);
# elsewhere they are skipped with a line saying why.
browser:
	@if command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
		 (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1)) || \
		echo "browser tests will be skipped: apt-get could not install chromium"; \
	else echo "browser tests will be skipped: install Debian's chromium package (apt-get install chromium) to run them"; fi

# The import layers (lint-imports) are checked once, by tests/test_layers.py. The tests run on one
# pytest-xdist worker per core (PYTEST_WORKERS=0 runs them in this process); with worksteal a worker
# that runs out of tests takes some of those still queued for another.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist worksteal
test: venv browser
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

test-fast: venv
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

bench: venv
	$(BIN)/python benchmarks/bench_access_logs.py

# The device run rehearsed here (docs/gpu.md, "On a lent GPU"): gpu/stage.py downloads what the
# lent machine needs beyond its image (gpu/device-needs.txt) for its Python 3.12 and cuts it into
# parts one call can carry (.device/parts, git-ignored); gpu/rehearse.py builds .venv-rehearsal
# from only the image's packages (gpu/device-image.txt) and the same pins (downloaded first,
# installed with --no-index), imports every module, collects the gpu tests, runs the gpu_api
# tier, plans every pipeline for the GPU, runs gpu_check.py --smoke and prints the device plan.
# `rm -rf .venv-rehearsal .device` starts it afresh.
.PHONY: gpu-stage gpu-rehearsal
REHEARSAL_PYTHON ?= python3.11

gpu-stage:
	$(PYTHON) gpu/stage.py

gpu-rehearsal: gpu-stage
	$(PYTHON) gpu/rehearse.py --python $(REHEARSAL_PYTHON)

# The GPU code checked without a GPU: the real RAPIDS extra (~3.7 GB) in its own cached venv,
# then the tests that need RAPIDS importable but no device (regexes compile in libcudf, the
# backend's RAPIDS calls exist and take the keywords used).
GPU_VENV := .venv-gpu
$(GPU_VENV)/bin/gpuetl: pyproject.toml
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install -q --upgrade pip
	$(GPU_VENV)/bin/pip install -q -e '.[gpu,dev]'
	touch $@

gpu-api-venv: $(GPU_VENV)/bin/gpuetl

gpu-api: $(GPU_VENV)/bin/gpuetl
	RAPIDS_NO_INITIALIZE=1 $(GPU_VENV)/bin/python -m pytest -q -p no:cacheprovider -m gpu_api tests

# The loader's torch outputs and adapter: torch (PyPI's wheel brings several GB of CUDA libraries)
# in its own cached venv, then the tests marked `torch` (elsewhere they skip, saying why).
TORCH_VENV := .venv-torch
$(TORCH_VENV)/bin/gpuetl: pyproject.toml
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/pip install -q --upgrade pip
	$(TORCH_VENV)/bin/pip install -q -e '.[dev]' torch
	touch $@

torch-venv: $(TORCH_VENV)/bin/gpuetl

test-torch: $(TORCH_VENV)/bin/gpuetl
	$(TORCH_VENV)/bin/python -m pytest -q -p no:cacheprovider -m torch tests/loader

bench-loader: venv
	$(BIN)/python benchmarks/bench_loader.py

bench-images: venv
	$(BIN)/python benchmarks/bench_images.py

clean:
	rm -rf $(VENV) $(GPU_VENV) $(TORCH_VENV) pipelines/data pipelines/out
