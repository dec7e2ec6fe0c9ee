# Set-up on a fresh machine: `make run` and `make test` (each creates .venv as needed).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared

.PHONY: install run test lint parity bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# The daemon's main job on the built-in echo bridge: spawn, handshake, one turn, the live timeline.
run: install
	$(PY) -m bbridge run --provider-cmd "$(PY) -m bridges.echo" --prompt "hello from bbridge"
	$(PY) -m bbridge run --provider-cmd "$(PY) -m bridges.echo" --prompt "deltas:all"

test: install
	$(PY) -m pytest

lint: install
	$(VENV)/bin/ruff check bbridge bridges tests
	$(VENV)/bin/ruff format --check bbridge bridges tests
	$(VENV)/bin/mypy

parity: install
	$(PY) -m bbridge parity recordings $(SHARED)/recordings --golden $(SHARED)/golden
	$(PY) -m bbridge parity cases $(SHARED)/golden/synthetic/cases.ndjson

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
