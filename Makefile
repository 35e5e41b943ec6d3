# Every target does its own set-up, so `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/ruff check effir tests benchmarks examples
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python benchmarks/parse_print.py
	$(BIN)/python benchmarks/check_and_run.py
	$(BIN)/python benchmarks/effect_passes.py
	$(BIN)/python benchmarks/pipeline.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
