# Two entry points (see README): `make demo` and `make test` (`make test-fast` skips the tests marked slow). Everything is installed into .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast venv sample-data bench clean

$(BIN)/gpuetl: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/gpuetl

sample-data: venv
	$(BIN)/python -m gpuetl.samples pipelines/data

demo: sample-data
	$(BIN)/gpuetl run pipelines/access_logs.yaml --set sink.mode=overwrite

test: venv
	$(BIN)/python -m pytest -q

test-fast: venv
	$(BIN)/python -m pytest -q -m "not slow"

bench: venv
	$(BIN)/python benchmarks/bench_access_logs.py

clean:
	rm -rf $(VENV) pipelines/data pipelines/out
