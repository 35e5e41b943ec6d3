# Every target does its own set-up, so `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast nightly typecheck-baseline duplicates-baseline lint bench bench-peers notebooks docs clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,dev,notebooks,docs]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# Two workers (pytest-xdist): the suite is CPU-bound and CI has 2 cores. Whole
# files go to one worker (--dist loadfile), so a module-scoped build is made once.
# Before it, three ratchets: the import contract, mypy's errors per file and the
# duplicate blocks of 6 lines or more (effir, tests, benchmarks, examples: pylint's
# symilar) per pair of files, neither above its checked-in baseline.
test: $(STAMP)
	$(BIN)/ruff check effir tests benchmarks examples
	$(BIN)/lint-imports  # the layers of pyproject.toml [tool.importlinter]
	$(BIN)/python -m tests.support.typecheck
	$(BIN)/python -m tests.support.duplicates
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --dist loadfile

# The edit loop: no TVM build, no notebook (tests/support/tiers.py: TVM is not
# even imported, and a test that imports it unmarked fails).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --dist loadfile -m "not tvm and not notebook and not nightly"

# mypy's errors per file, which `make test` allows no more of: after fixing some.
typecheck-baseline: $(STAMP)
	$(BIN)/python -m tests.support.typecheck --update

# The duplicate lines per pair of files that `make test` allows: after removing a copy
# (the baseline may only shrink; a new copy is moved into one shared function instead).
duplicates-baseline: $(STAMP)
	$(BIN)/python -m tests.support.duplicates --update

# The long runs: the fuzzers at full count, the narrow dtypes, the deep programs.
nightly: $(STAMP)
	$(BIN)/python -m pytest -n auto --maxprocesses 2 --dist loadfile -m nightly

# Re-execute the tutorials and save their outputs (they are committed executed;
# `make test` runs them too, without saving). Open them: .venv/bin/jupyter lab notebooks/
notebooks: $(STAMP)
	$(BIN)/python -m tests.notebooks.runner

# The API reference, generated from the docstrings of effir's public API
# (effir.__all__, with effir.transform, effir.train and effir.optim): open build/api/index.html.
docs: $(STAMP)
	$(BIN)/python -m pdoc --docformat restructuredtext --output-directory build/api effir
	@echo "the API reference: build/api/index.html"

bench: $(STAMP)
	$(BIN)/python benchmarks/parse_print.py
	$(BIN)/python benchmarks/check_and_run.py
	$(BIN)/python benchmarks/deep.py
	$(BIN)/python benchmarks/effect_passes.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/kernels.py
	$(BIN)/python benchmarks/gru_loop.py
	$(BIN)/python benchmarks/executor.py
	$(BIN)/python benchmarks/frontend.py

# The GRU (inference, and a training step) and compile latency against numpy, PyTorch and JAX: the peers go into a venv of their
# own (they are not effir's dependencies).
BENCH := .venv-bench
$(BENCH)/.installed: pyproject.toml benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(BENCH)
	$(BENCH)/bin/pip install --quiet --upgrade pip
	$(BENCH)/bin/pip install --quiet -e . -r benchmarks/requirements-peers.txt
	touch $(BENCH)/.installed

bench-peers: $(BENCH)/.installed
	$(BENCH)/bin/python benchmarks/gru_peers.py
	$(BENCH)/bin/python benchmarks/train_step.py
	$(BENCH)/bin/python benchmarks/compile_latency.py

clean:
	rm -rf $(VENV) $(BENCH) build *.egg-info .pytest_cache .hypothesis .mypy_cache
