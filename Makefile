# Every target installs what it needs into .venv itself, so a fresh clone works.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-fast lint demo bench completions clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

test-fast: $(STAMP)
	$(BIN)/pytest -m "not slow"

# Enqueues the example jobs, drains them with
# `taskq workgroup start workgroup.example.toml --until-idle`, prints a summary.
demo: $(STAMP)
	TASKQ_PG_DSN=$${TASKQ_PG_DSN:-embedded} $(BIN)/python -m examples.demo --workgroup workgroup.example.toml

bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py

completions: $(STAMP)
	$(BIN)/python scripts/gen_completions.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
