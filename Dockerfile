# The service's image: one image for every process (web, cluster, migrate, manage), chosen by the
# first argument (docker/entrypoint). docs/deployment.md, "Containers", explains each choice.
#
#   podman build -t sas .                      # from the public Debian image
#   podman build --build-arg BASE=localhost/sas-base:bookworm --build-arg WHEELS=build/wheels -t sas .
#                                              # offline: a local Debian base and prebuilt wheels
#
# Debian bookworm's python3 is 3.11, the project's version. The base may already carry python3,
# python3-venv, ca-certificates and tini (a base made by mmdebstrap does); otherwise they are
# installed from Debian.
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS base
RUN if ! (command -v python3 && command -v tini && python3 -c "import venv, ensurepip") >/dev/null 2>&1; then \
      apt-get update -q && \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        python3 python3-venv ca-certificates tini && \
      rm -rf /var/lib/apt/lists/*; \
    fi

# Dependencies in a virtualenv of their own, from the pinned requirements: from PyPI, or from a
# folder of wheels (WHEELS) when the build has no network.
FROM base AS build
ARG WHEELS=docker/no-wheels
COPY requirements.txt /tmp/requirements.txt
COPY ${WHEELS} /tmp/wheels/
RUN python3 -m venv /opt/venv && \
    if ls /tmp/wheels/*.whl >/dev/null 2>&1; then \
      /opt/venv/bin/pip install -q --no-index --find-links /tmp/wheels -r /tmp/requirements.txt; \
    else \
      /opt/venv/bin/pip install -q --no-cache-dir -r /tmp/requirements.txt; \
    fi && \
    find /opt/venv -name __pycache__ -prune -exec rm -rf {} +

FROM base
# A user of its own, no login, no home to write to: the service writes only to SAS_VAR_DIR.
RUN groupadd --system --gid 10001 sas && \
    useradd --system --uid 10001 --gid sas --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sas && \
    mkdir -p /var/lib/sas && chown sas:sas /var/lib/sas
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
COPY --chown=root:root . /app
# The static files are collected at build (whitenoise serves them); a throwaway key, since the
# settings refuse to start without one outside debug and the build must not know the real one.
RUN DJANGO_SECRET_KEY="build-only-$(python3 -c 'import secrets; print(secrets.token_urlsafe(40))')" \
      SAS_STATIC_ROOT=/app/staticfiles /opt/venv/bin/python manage.py collectstatic --noinput -v0 && \
    /opt/venv/bin/python -m compileall -q /app /opt/venv >/dev/null
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    SAS_STATIC_ROOT=/app/staticfiles \
    SAS_VAR_DIR=/var/lib/sas \
    SAS_WEB_BIND=0.0.0.0:8000
USER sas
EXPOSE 8000
VOLUME ["/var/lib/sas"]
# tini is PID 1: it forwards SIGTERM to the process it started (gunicorn's master, qcluster),
# which stops its own workers cleanly, and reaps whatever is orphaned.
ENTRYPOINT ["tini", "--", "/app/docker/entrypoint"]
CMD ["web"]
