# Two commands on a fresh clone: `make demo` (the main job) and `make test` (the whole suite).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# The unit tier of these is `make test-fast`: under a minute on this 2-core machine.
FAST_DIRS := tests/unit tests/core tests/edge tests/storage tests/protocol

.PHONY: setup tools bytecode demo test test-fast lint bench clean

$(BIN)/pigeon: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

setup: $(BIN)/pigeon

# Chromium and promtool for the operations page's tests (system packages; see .ci/tools).
tools:
	sh .ci/tools

# Bytecode for src/ and tests/, written once: where PYTHONDONTWRITEBYTECODE is set, every
# process the demo or the suite starts (hundreds) compiled pigeon anew, ~0.3 s a start.
bytecode: setup
	$(BIN)/python -m compileall -q src tests

demo: setup bytecode
	$(BIN)/pigeon demo

lint: setup
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/mypy
	$(BIN)/lint-imports   # the layers of docs/design.md ([tool.importlinter] in pyproject.toml)

test: lint tools bytecode
	# Two workers: most tests wait on processes, sockets and fsyncs, so two share the
	# machine's two cores well; worksteal evens out the long chaos and crash tests.
	$(BIN)/pytest -n 2 --dist worksteal

# The unit tier (tests/tiers.py marks the others): no PostgreSQL, broker, browser or
# process of its own; the directories of the core, edge, storage, protocol and sync code.
test-fast: setup bytecode
	$(BIN)/pytest -q -n 2 -m "not integration and not chaos" $(FAST_DIRS)

bench: setup
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
