# Two entry points (see README): `make demo` and `make test`. Everything is installed into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo demo-images test venv sample-data bench bench-images clean

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

test: venv
	$(BIN)/python -m pytest -q

bench: venv
	$(BIN)/python benchmarks/bench_access_logs.py

bench-images: venv
	$(BIN)/python benchmarks/bench_images.py

clean:
	rm -rf $(VENV) pipelines/data pipelines/out
