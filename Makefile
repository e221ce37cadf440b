# Two commands are the contract:
#   make lab   installs the course into .venv and opens it in JupyterLab
#   make test  installs the same environment and runs the whole test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PORT ?= 8888
HOST ?= 127.0.0.1
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
SITE := docs/_build/html

.PHONY: install lab test lint bench clean notebooks exercises grade sync-notebooks colab-check \
	site site-check

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed; run make PYTHON=python3.11 ...")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[lab,test,docs]'
	touch $(STAMP) $(DOCS_STAMP)

install: $(STAMP)

# Opens JupyterLab at the course's root (lessons, exercises, solutions and course_lib in
# view; the build and test files hidden by tools/jupyter_lab_config.py). PORT and HOST may
# come from the environment (e.g. PORT=9999 make lab); --allow-root lets it start as root
# inside a container.
lab: $(STAMP)
	$(BIN)/jupyter lab --config=tools/jupyter_lab_config.py --ServerApp.root_dir=. \
		--ServerApp.ip=$(HOST) --ServerApp.port=$(PORT) \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root ) $(LAB_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .

# The tests, then every lesson and every solution under nbval in fast mode, on both cores
# (--dist loadfile keeps a notebook's cells in one kernel).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 --dist loadfile --nbval-lax --nbval-sanitize-with tests/sanitize.cfg \
		tests notebooks solutions

# Re-executes every lesson and every solution in place, in full mode, so the committed
# notebooks show real outputs (under a minute per notebook on 2 cores).
notebooks: $(STAMP)
	$(BIN)/python tools/notebooks.py execute notebooks/*.ipynb solutions/*.ipynb

# Writes exercises/ from solutions/ (the SOLUTION regions become stubs); commit both.
exercises: $(STAMP)
	$(BIN)/python tools/exercises.py generate

# Grades the exercises (or the notebooks in PATHS) in fresh kernels and prints a scoreboard.
grade: $(STAMP)
	$(BIN)/python -m course_lib.grade $(or $(PATHS),exercises)

# Rewrites every notebook's badges and Colab setup cell from pyproject.toml's Source URL.
sync-notebooks: $(STAMP)
	$(BIN)/python tools/notebooks.py sync

# Colab's stack (Python 3.12, jax 0.7.2, flax 0.11.2, optax 0.2.8, numpy 2.x, no chex) in its
# own environment, .colab-venv/: installs the course the way the setup cell does, then runs
# every notebook in fast mode. Not part of `make test`: it installs a second JAX.
colab-check: $(STAMP)
	$(BIN)/python tools/colab_check.py

# Benchmarks compare against real Grain and torch, which the course itself does not need.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet grain torch==2.13.0
	$(BIN)/python benchmarks/run_benchmarks.py

# The course as a website, in $(SITE): the committed lessons (not run again), the exercises,
# the README's guides and the course_lib API reference. Needs only the docs extra.
$(DOCS_STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed; run make PYTHON=python3.11 ...")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

site: $(DOCS_STAMP)
	$(BIN)/python -m sphinx -b html -W --keep-going -q -d docs/_build/doctrees docs $(SITE)
	@echo "The site is built: open $(SITE)/index.html"

# Serves the site on 127.0.0.1 and opens every page in headless Chromium (Debian's
# `chromium` package); fails on a page that does not load or logs a JavaScript error, and
# saves screenshots in $(SITE)/../screenshots. Not part of `make test`: it needs the browser.
site-check: site
	$(BIN)/python tools/site_check.py $(SITE)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis docs/_build docs/notebooks \
		docs/exercises docs/readme
