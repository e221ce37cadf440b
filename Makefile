# Two commands are the contract:
#   make lab   installs the course into .venv and opens it in JupyterLab
#   make test  installs the same environment and runs the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8888
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed

.PHONY: install lab test lint bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed; run make PYTHON=python3.11 ...")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[lab,test]'
	touch $(STAMP)

install: $(STAMP)

# Opens JupyterLab on notebooks/. PORT and HOST may come from the environment
# (e.g. PORT=9999 make lab); --allow-root lets it start as root inside a container.
lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) $(LAB_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

# Benchmarks compare against real Grain and torch, which the course itself does not need.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet grain torch==2.13.0
	$(BIN)/python benchmarks/run_benchmarks.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
