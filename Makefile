# Two commands do everything on a fresh machine with Python 3.11:
#   make run   - venv, install, migrate, demo data, then web + cluster + sandbox remote (SQLite)
#   make test  - venv, install, a throwaway PostgreSQL 15, the whole suite
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.run-installed
DEV_STAMP := $(VENV)/.dev-installed

.PHONY: run test venv lint typecheck bench campaign clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(RUN_STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt
	touch $@

$(DEV_STAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(RUN_STAMP)

venv: $(DEV_STAMP)

run: $(RUN_STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_demo --admin
	$(BIN)/honcho -f Procfile start

test: $(DEV_STAMP)
	scripts/ensure-system-packages
	$(BIN)/python scripts/with_postgres.py -- $(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: $(DEV_STAMP)
	$(BIN)/mypy .

clean:
	rm -rf $(VENV) var test-artifacts staticfiles .pytest_cache .ruff_cache .mypy_cache .hypothesis
