# Two commands do everything on a fresh machine with Python 3.11:
#   make run   - venv, install, migrate, demo data, then web + cluster + sandbox remote + a
#                throwaway Redis for the demo's queue step (SQLite)
#   make test  - venv, install, the SQLite subset (the make-run default), then a throwaway
#                PostgreSQL 15 and the whole suite
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.run-installed
DEV_STAMP := $(VENV)/.dev-installed

.PHONY: run serve test test-sqlite test-postgres image image-test venv lint typecheck audit bench campaign clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The demo's venv also holds the `sas` command (clients/python), for the README's client quick start.
$(RUN_STAMP): requirements.txt clients/python/pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -r requirements.txt -e ./clients/python
	touch $@

$(DEV_STAMP): requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@ $(RUN_STAMP)

venv: $(DEV_STAMP)

# The demo serves on loopback: the web server on DEMO_WEB_PORT, the sandbox remote on
# DEMO_SANDBOX_PORT (make run DEMO_WEB_PORT=8001 DEMO_SANDBOX_PORT=8101 beside another demo;
# tests/e2e/test_readme_runs.py runs it so on free ports). The Procfile reads both.
DEMO_WEB_PORT ?= 8000
DEMO_SANDBOX_PORT ?= 8100

# The demo's Redis (the broker of its queue step) listens on a free port, chosen here and passed
# to the demo data, the sandbox remote and redis-server alike.
# Outbound requests never reach internal addresses unless SAS_OUTBOUND_INTERNAL_HOSTS names them:
# the demo names its sandbox remote and its Redis, and nothing else. Add your own local services
# to it (README, "Point it at your own HTTP service").
# The demo runs with debug off, as deployed, so it needs a secret key of its own (the settings
# refuse to start without one): DJANGO_SECRET_KEY when set, else a key made once on this machine
# and kept in $(DEMO_KEY) (mode 0600), so that sessions and callback tokens survive a restart.
# Other commands run against the demo take it the same way: export DJANGO_SECRET_KEY=$(cat var/demo-secret-key)
DEMO_KEY ?= var/demo-secret-key
WITH_KEY = DJANGO_SECRET_KEY="$${DJANGO_SECRET_KEY:-$$(cat $(DEMO_KEY))}"

$(DEMO_KEY): | $(BIN)/python
	@mkdir -p $(dir $@) && umask 077 && \
	$(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(50))' > $@.tmp && mv $@.tmp $@

run: export SAS_OUTBOUND_INTERNAL_HOSTS ?= 127.0.0.1:$(DEMO_SANDBOX_PORT),localhost:$(DEMO_SANDBOX_PORT)
# The remotes' callbacks (X-SAS-Callback-URL) go to the web server's port.
run: export SAS_PUBLIC_URL ?= http://127.0.0.1:$(DEMO_WEB_PORT)
run: export DEMO_WEB_PORT := $(DEMO_WEB_PORT)
run: export DEMO_SANDBOX_PORT := $(DEMO_SANDBOX_PORT)
run: $(RUN_STAMP) $(DEMO_KEY)
	scripts/ensure-system-packages redis
	$(WITH_KEY) $(BIN)/python manage.py migrate --noinput
	@port=$$($(BIN)/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])') && \
	export $(WITH_KEY) && \
	export SAS_DEMO_REDIS_PORT=$$port SAS_DEMO_BROKER=redis://127.0.0.1:$$port/0 SAS_LOG_FORMAT=text \
	  SAS_OUTBOUND_INTERNAL_HOSTS=$$SAS_OUTBOUND_INTERNAL_HOSTS,127.0.0.1:$$port && \
	$(BIN)/python manage.py load_demo --admin --broker $$SAS_DEMO_BROKER \
	  --sandbox-url http://127.0.0.1:$(DEMO_SANDBOX_PORT) --backup-url http://localhost:$(DEMO_SANDBOX_PORT) && \
	$(BIN)/honcho -f Procfile start

# Production serving on PostgreSQL (docs/deployment.md): migrate, collect the static files, then
# gunicorn and one qcluster, stopped together on Ctrl-C or SIGTERM.
serve: $(RUN_STAMP)
	@case "$$DATABASE_URL" in postgres*) ;; *) echo "make serve runs on PostgreSQL: set DATABASE_URL"; exit 2;; esac
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py collectstatic --noinput -v0
	$(BIN)/honcho -f Procfile.prod start

test: test-sqlite test-postgres image-test

# The tests marked `sqlite` on the embedded default of `make run` (a fresh SQLite file in a
# temporary folder; tests/conftest.py keeps only those tests on SQLite), a real qcluster included,
# and the README's commands against a `make run` of their own (tests/e2e/test_readme_runs.py:
# Redis for make run, curl and jq for the commands).
test-sqlite: $(DEV_STAMP)
	scripts/ensure-system-packages redis curl jq
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	env -u DATABASE_URL SAS_VAR_DIR="$$tmp" $(BIN)/python -m pytest --create-db -p no:cacheprovider $(SQLITE_PYTEST_ARGS)

# The whole suite on a throwaway PostgreSQL: two workers, then the tests marked `serial` alone
# (the fault campaign restarts the server). PYTEST_ARGS runs just those arguments instead.
test-postgres: $(DEV_STAMP)
	scripts/ensure-system-packages
ifdef PYTEST_ARGS
	$(BIN)/python scripts/with_postgres.py -- $(BIN)/python -m pytest $(PYTEST_ARGS)
else
	$(BIN)/python scripts/with_postgres.py -- sh -c \
	  '$(BIN)/python -m pytest -n 2 -m "not serial and not image" && $(BIN)/python -m pytest -m "serial and not image"'
endif

# The container image (Dockerfile), built offline with podman from a local Debian base
# (testbed/image.py), then run as a deployment runs it: migrate, web, cluster, a job, SIGTERM.
image: $(DEV_STAMP)
	scripts/ensure-system-packages podman
	$(BIN)/python -m testbed.image --tag localhost/sas:latest

image-test: $(DEV_STAMP)
	scripts/ensure-system-packages podman postgresql
	$(BIN)/python scripts/with_postgres.py -- $(BIN)/python -m pytest -p no:cacheprovider -m image

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: $(DEV_STAMP)
	$(BIN)/mypy .

# Known vulnerabilities in the pinned dependencies (PyPI's advisory data): any fails the run. A
# package the index cannot answer for is listed as skipped.
audit: $(DEV_STAMP)
	$(BIN)/pip-audit -r requirements-dev.txt --no-deps --disable-pip --progress-spinner off

clean:
	rm -rf $(VENV) var test-artifacts staticfiles .pytest_cache .ruff_cache .mypy_cache .hypothesis
