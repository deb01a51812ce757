# The two commands a new user needs (see README.md):
#   make demo   set up everything and run the bursting demo
#   make test   set up everything and run lint, type checks and the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python
# Debian's python3: SlurmUser must be able to run the hooks from the virtualenv, and an
# interpreter under /root (pyenv) is not reachable for it.
PYTHON ?= $(shell test -x /usr/bin/python3 && echo /usr/bin/python3 || echo python3)
PYTEST_ARGS ?=

.PHONY: setup debs demo test test-unit lint bench clean

setup: $(VENV)/.installed

debs:
	bash .ci/install-debs

$(VENV)/.installed: pyproject.toml setup.py .ci/install-debs
	bash .ci/install-debs
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[all,test]'
	touch $@

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

test: lint
	$(VENV)/bin/pytest -n 2 $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/pytest -m unit -q

demo: setup
	$(PY) -m tests.labs.demo

bench: setup
	$(PY) bench/bench_cli.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
