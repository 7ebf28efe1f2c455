# The two commands a newcomer runs: `make demo` and `make test`.
# Each creates and fills its own virtual environment in .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# setup.py and the C source: the compiled row copies (feedline._base._rowcopy) are built
# at install, so a change to them installs again
$(VENV)/.demo-installed: pyproject.toml setup.py src/feedline/_base/_rowcopy.c src/feedline/_base/_spans.c src/feedline/_base/_windows.c src/feedline/_base/_packing.c src/feedline/_base/_ordering.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[fast,demo,vision,parquet]"
	touch $@

$(VENV)/.test-installed: pyproject.toml setup.py src/feedline/_base/_rowcopy.c src/feedline/_base/_spans.c src/feedline/_base/_windows.c src/feedline/_base/_packing.c src/feedline/_base/_ordering.c | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[fast,demo,vision,parquet,test]"
	touch $@ $(VENV)/.demo-installed

demo: $(VENV)/.demo-installed
	$(BIN)/feedline demo

test: $(VENV)/.test-installed
	$(BIN)/ruff check src tests benchmarks tools
	$(BIN)/ruff format --check src tests benchmarks tools
	$(BIN)/mypy src/feedline
	$(BIN)/python -m pytest

bench: $(VENV)/.demo-installed
	$(BIN)/feedline bench

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache src/feedline/_base/*.so
