"""Settings, read from the environment, typed and checked when the process starts (environs: every
bad value is named at once, docs/settings.md).

Only the variables documented in docs/settings.md are read; everything else is fixed here. Production
deployments set DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS and DATABASE_URL (PostgreSQL).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from environs import Env, EnvValidationError
from marshmallow.validate import OneOf, Range, Regexp

from sas_project.storage import s3_archive_storage

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SAS_VAR_DIR", BASE_DIR / "var"))


_env = Env(eager=False)


class _Reader:
    """environs' typed reads (`env.int(name, default, validate=...)`, `env.float`, `env.bool`,
    `env.str`), each bad value collected rather than raised: it reads as its default meanwhile,
    so that the settings computed from it can still be, and the end of this module refuses to
    start with one line per bad value (`_env.seal()`)."""

    def __getattr__(self, kind: str) -> Callable[..., Any]:
        parse = getattr(_env, kind)

        def read(name: str, default: Any, **kwargs: Any) -> Any:
            value = parse(name, default, **kwargs)
            if value is None and os.environ.get(name) is not None:
                return default  # refused: named by seal() below
            return value

        return read


env = _Reader()
_SECRET_NAMES = re.compile(r"SECRET|TOKEN|PASSWORD|KEY")
LOG_LEVELS = OneOf(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"])


def _env_bool(name: str, default: bool) -> bool:
    """1/0, true/false, yes/no, on/off (any case); anything else is refused at start."""
    return bool(env.bool(name, default))


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = _env_bool("DJANGO_DEBUG", False)
# The key signs sessions, callback tokens and django-q's task packages, and the callback secret is
# derived from it: whoever knows it forges all of them. Outside debug a process refuses to start
# without a key of its own, here rather than in a system check, because gunicorn and django-q's
# workers never run the checks. With debug on (a developer's machine) a public demo key is used.
SECRET_KEY = env.str("DJANGO_SECRET_KEY", "").strip()
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "django-insecure-local-demo-key-change-me-0123456789abcdefghijklmnop"  # noqa: S105 (public, debug only)
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    # Login lockout for the console and the admin (its attempts are rows in the database).
    "axes",
    "rest_framework",
    # API tokens (expiring, revocable); its `drf_create_token` replaces DRF's for scripts.
    "sas_project.tokens",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # Before django_q: supervisor's `qcluster` command wraps django-q2's to run the scan loop.
    "supervisor",
    "scheduler",
    "agents",
    "django_q",
    # Tools beside the product (sandbox remote, fault campaign, benchmark): commands only.
    "testbed",
]

MIDDLEWARE = [
    # The probes and the metrics first: they are asked with the pod's address as Host, which
    # ALLOWED_HOSTS does not list (supervisor.probes.ProbesBeforeHostCheck).
    "supervisor.probes.ProbesBeforeHostCheck",
    "django.middleware.security.SecurityMiddleware",
    # The Content-Security-Policy header on every answer (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # Serves the console's and the admin's static files (htmx, CSS) from the app itself.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # RateLimit-* headers on the API's answers whose request the throttles counted.
    "sas_project.throttling.rate_limit_headers",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes wants it: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sas_project.urls"
WSGI_APPLICATION = "sas_project.wsgi.application"
ASGI_APPLICATION = "sas_project.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "supervisor.context.console_roles",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
# Default: an embedded SQLite file shared by the web server and the cluster workers. WAL lets
# readers run beside the writer; IMMEDIATE transactions take the write lock up front, so a
# read-then-write transaction waits on the busy timeout instead of failing with "database is
# locked" (see docs/settings.md, "The embedded SQLite database").
_default_sqlite = f"sqlite:///{VAR_DIR / 'sas.sqlite3'}"
# DATABASE_URL points at a transaction-pooling PgBouncer (several hosts on one PostgreSQL): no
# session state may outlive a transaction (startup options, prepared statements, held cursors,
# LISTEN). docs/deployment.md, "Many hosts".
SAS_DB_TRANSACTION_POOLING = _env_bool("SAS_DB_TRANSACTION_POOLING", False)
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", _default_sqlite), conn_max_age=60, conn_health_checks=True
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file (not :memory:) so that a cluster subprocess can share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-sas.sqlite3")}
else:
    DATABASES["default"].setdefault("OPTIONS", {})
    if not SAS_DB_TRANSACTION_POOLING:
        # Short server-side limits keep a stuck session from holding back the hot tables. A
        # transaction pooler refuses the `options` startup parameter: behind one, the same limits
        # are set on the role or by the pooler (docs/deployment.md, "Many hosts").
        DATABASES["default"]["OPTIONS"].setdefault(
            "options",
            "-c idle_in_transaction_session_timeout=60000 -c lock_timeout=30000",
        )
    else:
        # A server session is ours for one transaction only: a WITH HOLD cursor, which Django
        # opens for .iterator() outside a transaction, would outlive it on someone else's session.
        DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    if _env_bool("SAS_DB_PREPARED", not SAS_DB_TRANSACTION_POOLING):
        # Server-side parameters, and statements prepared once a connection has run them 5 times:
        # the hot path's statements are planned once per connection instead of once per call.
        # Off by default behind a transaction pooler: a prepared statement lives in one server
        # session (PgBouncer 1.21+ can carry them; docs/deployment.md says when that is safe).
        DATABASES["default"]["OPTIONS"]["server_side_binding"] = True
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 5
    # Names this process's sessions in pg_stat_activity (the fault campaign drops them by name).
    DATABASES["default"]["OPTIONS"].setdefault("application_name", env.str("SAS_DB_APPLICATION_NAME", "sas"))

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: it refuses a locked-out account or address before any password is checked.
# Then Django's model backend, with a user's own and group permissions read in one query.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "sas_project.auth.RoleBackend"]

# --- Login protection (django-axes) -----------------------------------------------------------
# SAS_LOGIN_FAILURE_LIMIT failed sign-ins lock the account (from any address) and the address
# (for any account) for SAS_LOGIN_LOCKOUT_MINUTES; a failure while locked restarts the wait. The
# console's and the admin's login both go through it. Administrators see the attempts in the
# admin (Axes) and unlock by deleting them, or with `manage.py axes_reset`.
AXES_FAILURE_LIMIT = env.int("SAS_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = dt.timedelta(minutes=env.float("SAS_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "sas_project.throttling.lockout_response"
AXES_CLIENT_IP_CALLABLE = "sas_project.throttling.client_ip"
# No start-up banner; lockouts are still logged (with the username and address masked).
AXES_VERBOSE = False

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# `collectstatic` writes here for production; WhiteNoise also finds files in the apps' static
# folders directly (no collectstatic needed to run), and wants the folder to exist.
STATIC_ROOT = Path(os.environ.get("SAS_STATIC_ROOT", BASE_DIR / "staticfiles"))
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True
# The console's stylesheet and script (templates/base.html), beside the shared templates.
STATICFILES_DIRS = [BASE_DIR / "static"]

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/ops/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

# Bodies larger than this are refused before they are parsed (also applies to DRF >= 3.17.2).
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("SAS_MAX_BODY_BYTES", 256 * 1024)

# --- Security (production values when DEBUG is off) --------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
# Content-Security-Policy (django-csp) on the console, the admin and the API's docs: scripts,
# styles, images and fonts from this origin only, no inline script, style or event handler (the
# templates have none: the console's CSS and JS are static files), no eval, no framing, forms
# posting to this origin only. `data:` images are the favicon and Swagger UI's icons.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
    }
}

if _env_bool("DJANGO_SECURE", False):
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    # Load balancers and Prometheus probe these over plain HTTP on the private network.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^supervisorz$", r"^metrics$"]

# A health check costs a `SELECT 1` (and a commit) each time a connection is reused after
# close_old_connections(), which django-q2 calls before every task and every broker poll. The
# cluster does without: a dead connection fails one task, whose step the supervisor retries.
if "qcluster" in sys.argv and not _env_bool("SAS_DB_HEALTH_CHECKS", False):
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False

# --- django-q2 --------------------------------------------------------------------------------
# The supervisor owns retries; the broker is set to deliver once (docs/task-queue.md). `retry`
# is far above any agent call so that only a dead worker's task is ever re-delivered, and such a
# delivery is absorbed by the attempt claim.
Q_CLUSTER = {
    "name": "sas",
    "orm": "default",
    "workers": env.int("SAS_Q_WORKERS", 4, validate=Range(min=1)),
    "queue_limit": env.int("SAS_Q_WORKERS", 4, validate=Range(min=1)),
    # A pusher takes up to 4 tasks per look: a third of the commits of one look per task, and the
    # best throughput measured (docs/performance-history.md, "How it got there").
    "bulk": env.int("SAS_Q_BULK", 4),
    "poll": env.float("SAS_Q_POLL", 0.2),
    "timeout": env.int("SAS_Q_TIMEOUT", 120),
    "retry": env.int("SAS_Q_RETRY", 600),
    "max_attempts": 1,
    "ack_failures": True,
    "catch_up": False,
    "save_limit": env.int("SAS_Q_SAVE_LIMIT", -1),
    "recycle": 500,
    "max_rss": 300_000,
    "label": "Task queue",
    # Claims a task by deleting it: one statement per task, no broker re-delivery (the
    # supervisor's deadlines recover a task lost with its worker). See agents/broker.py.
    "broker_class": "agents.broker.ClaimByDeleteORM",
    "log_level": env.str("SAS_Q_LOG_LEVEL", "WARNING", validate=LOG_LEVELS),
}

# --- REST framework ---------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "sas_project.auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Rates per user and, for anonymous requests, per address (SAS_THROTTLE_USER,
    # SAS_THROTTLE_ANON and their bursts, read at each request by sas_project.throttling),
    # counted in the database for every process: 429 with Retry-After.
    "DEFAULT_THROTTLE_CLASSES": [
        "sas_project.throttling.AnonThrottle",
        "sas_project.throttling.UserThrottle",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # One error mapping for the API: the service's errors, oversized and undecodable bodies.
    "EXCEPTION_HANDLER": "sas_project.api.exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Scheduler Agent Supervisor API",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "DESCRIPTION": (
        "Submit and inspect jobs, act on jobs and steps, and manage workflows, pools and policies. "
        "Authenticate with `Authorization: Token <key>` (`manage.py drf_create_token <user>`)."
    ),
    # Request bodies get their own components (no read-only fields in them).
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "scheduler.models.JobStatus",
        "StepStatusEnum": "scheduler.models.StepStatus",
        "StepKindEnum": "scheduler.models.StepKind",
        "AttemptKindEnum": "agents.outcome.AttemptKind",
        "OutcomeEnum": "agents.outcome.Outcome",
        "AgentKindEnum": "agents.models.AgentKind",
        "OnExhaustedEnum": "scheduler.models.OnExhausted",
        "OnLimitEnum": "scheduler.flow_definitions.ON_LIMIT",
        "TokenStatusEnum": "sas_project.tokens.models.TokenStatus",
    },
    # --- Beyond the views' declarations (sas_project.openapi): request examples, the 429 and the
    # RateLimit-* headers of counted operations, and what the service sends, as OAS 3.1 webhooks
    # (completion callbacks, alerts, the remote contract).
    "OAS_VERSION": "3.1.0",
    "WEBHOOKS": [
        "sas_project.openapi.COMPLETION_CALLBACK",
        "sas_project.openapi.ALERT_WEBHOOK",
        "sas_project.openapi.REMOTE_CALL",
        "sas_project.openapi.REMOTE_STATUS_QUERY",
        "sas_project.openapi.REMOTE_CANCEL",
    ],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "sas_project.openapi.nullable_any",
        "sas_project.openapi.add_request_examples",
        "sas_project.openapi.document_rates",
        "sas_project.openapi.complete_webhooks",
    ],
}

# --- The service's own settings (read through sas_project.conf) -------------------------------
SAS_SUPERVISOR_INTERVAL = env.float("SAS_SUPERVISOR_INTERVAL", 5, validate=Range(min=0.05))
SAS_CLUSTER_HEARTBEAT_SECONDS = env.float("SAS_CLUSTER_HEARTBEAT_SECONDS", 10, validate=Range(min=0.1))
# Touched at every heartbeat while the cluster's sentinel lives: a container's liveness probe
# reads its age without starting Python (docker/entrypoint alive).
SAS_CLUSTER_ALIVE_FILE = Path(os.environ.get("SAS_CLUSTER_ALIVE_FILE", VAR_DIR / "cluster-alive"))
# Each kind of outbound URL has its own lists (agents.validation): agent endpoints and brokers,
# completion callbacks (set by any submitter), alert webhooks. A restrictive list, when set, is
# the only hosts that kind may target (and they may be internal).
SAS_AGENT_ALLOWED_HOSTS = _env_list("SAS_AGENT_ALLOWED_HOSTS")
SAS_CALLBACK_ALLOWED_HOSTS = _env_list("SAS_CALLBACK_ALLOWED_HOSTS")
SAS_WEBHOOK_ALLOWED_HOSTS = _env_list("SAS_WEBHOOK_ALLOWED_HOSTS")
# Outbound requests never reach internal addresses unless a host is named in the list of their
# kind (or its restrictive list): `make run` names its sandbox and Redis for agents, production
# its internal services. A callback or webhook receiver on an internal host needs its own entry.
SAS_OUTBOUND_INTERNAL_HOSTS = _env_list("SAS_OUTBOUND_INTERNAL_HOSTS")
SAS_CALLBACK_INTERNAL_HOSTS = _env_list("SAS_CALLBACK_INTERNAL_HOSTS")
SAS_WEBHOOK_INTERNAL_HOSTS = _env_list("SAS_WEBHOOK_INTERNAL_HOSTS")
SAS_SUPERVISOR_IN_CLUSTER = _env_bool("SAS_SUPERVISOR_IN_CLUSTER", True)
# The canary (supervisor.canary): every this many seconds a job of the service's own that succeeds
# only through the supervisor's retry (its route, under SAS_PUBLIC_URL, drops the first call);
# 0 turns it off. The test suite turns it off (tests/secret_key.py) unless a test asks.
SAS_CANARY_SECONDS = env.float("SAS_CANARY_SECONDS", 60, validate=Range(min=0))
# Where the clusters reach a web process for the canary's call when SAS_PUBLIC_URL is not that
# (an internal name: http://sas-web, http://web:8000); empty: SAS_PUBLIC_URL.
SAS_CANARY_URL = env.str("SAS_CANARY_URL", "")
# A LISTEN through a transaction pooler registers on whichever server session ran it, and the
# announcements never reach the pusher: behind one, idle pushers look every SAS_Q_POLL instead.
SAS_Q_NOTIFY = _env_bool("SAS_Q_NOTIFY", True) and not SAS_DB_TRANSACTION_POOLING
# The outcome's one-round-trip PostgreSQL function (scheduler.services.hotpath); off only to
# compare it with the general path.
SAS_FAST_PATH = _env_bool("SAS_FAST_PATH", True)
# After a success, the worker takes up to this many of the job's next attempts from the queue and
# delivers them itself (scheduler.services.hotpath.take_next); 0: every attempt through the queue.
SAS_Q_CONTINUE = env.int("SAS_Q_CONTINUE", 8, validate=Range(min=0))
SAS_LEASE_SECONDS = env.float("SAS_LEASE_SECONDS", 3 * SAS_SUPERVISOR_INTERVAL, validate=Range(min=0.1))
#: The most items one fan-out step may have: a longer list fails the step, naming the limit.
SAS_MAX_FANOUT_ITEMS = env.int("SAS_MAX_FANOUT_ITEMS", 1000, validate=Range(min=1))
# Jobs in one POST /api/v1/jobs/batch/ (one transaction).
SAS_MAX_BATCH_JOBS = env.int("SAS_MAX_BATCH_JOBS", 100, validate=Range(min=1, max=1000))
SAS_SCHEDULES_PER_USER = env.int("SAS_SCHEDULES_PER_USER", 50)
# A schedule whose firings raise this many times in a row pauses itself (scheduler.schedules).
SAS_SCHEDULE_MAX_FAILURES = env.int("SAS_SCHEDULE_MAX_FAILURES", 5, validate=Range(min=1))
# The most fire times one backfill of a schedule may cover (a longer range is a 400).
SAS_SCHEDULE_BACKFILL_MAX = env.int("SAS_SCHEDULE_BACKFILL_MAX", 1000, validate=Range(min=1, max=100000))
# An item a loop quarantined is left alone this long before the loop tries it again.
SAS_QUARANTINE_RETRY_SECONDS = env.float("SAS_QUARANTINE_RETRY_SECONDS", 600, validate=Range(min=0))
# Remediation debt (supervisor.debt): steps more than two intervals past due with no remediation
# since; when the oldest is older than this many intervals under one holder, another cluster
# takes the lease over.
SAS_DEBT_TAKEOVER_INTERVALS = env.float("SAS_DEBT_TAKEOVER_INTERVALS", 3, validate=Range(min=1))
#: How deep sub-workflows may nest (a child of a child ...): deeper, the step fails.
SAS_MAX_WORKFLOW_DEPTH = env.int("SAS_MAX_WORKFLOW_DEPTH", 5)
# The most jobs below one submitted job (children, theirs, ...); 0: no limit but the depth.
SAS_MAX_DESCENDANT_JOBS = env.int("SAS_MAX_DESCENDANT_JOBS", 1000, validate=Range(min=0))
# The largest output a fan-out's join keeps in itself (its items' outputs as JSON text); past it
# the join's output refers to its items instead. 0: no limit.
SAS_MAX_JOIN_BYTES = env.int("SAS_MAX_JOIN_BYTES", 1024 * 1024, validate=Range(min=0))
SAS_SCAN_BATCH_SIZE = env.int("SAS_SCAN_BATCH_SIZE", 200, validate=Range(min=1))
SAS_HEALTH_COOLDOWN_SECONDS = env.float("SAS_HEALTH_COOLDOWN_SECONDS", 30)
SAS_HEALTH_WINDOW = env.int("SAS_HEALTH_WINDOW", 10)
SAS_RESPONSE_EXCERPT_BYTES = env.int("SAS_RESPONSE_EXCERPT_BYTES", 2048)
SAS_MAX_RESPONSE_BYTES = env.int("SAS_MAX_RESPONSE_BYTES", 1024 * 1024, validate=Range(min=1024))
# Python steps may call only these callables (dotted paths; `module.*` for every callable of a
# module): a definition naming anything else is refused when saved and when called.
SAS_PYTHON_AGENTS = _env_list("SAS_PYTHON_AGENTS", "agents.builtin.noop,agents.builtin.echo")
# Where remotes reach this service: HTTP calls carry X-SAS-Callback-URL under it, for remotes that
# answer 202 and report the result later. Empty: no callback URL is sent.
SAS_PUBLIC_URL = env.str("SAS_PUBLIC_URL", "http://127.0.0.1:8000")
SAS_CALLBACK_TOKEN_MAX_AGE = env.float("SAS_CALLBACK_TOKEN_MAX_AGE", 7 * 24 * 3600)
SAS_REPLY_QUEUE = env.str("SAS_REPLY_QUEUE", "sas.replies")
SAS_REPLIES_IN_CLUSTER = _env_bool("SAS_REPLIES_IN_CLUSTER", True)
# Tries at recording a reply while the database answers, then it goes to `<reply queue>.dead`.
SAS_REPLY_MAX_TRIES = env.int("SAS_REPLY_MAX_TRIES", 5, validate=Range(min=1))
# The certificate authorities of TLS brokers (rediss://, amqps://); empty: the system's trust store.
SAS_BROKER_CA_FILE = env.str("SAS_BROKER_CA_FILE", "")
SAS_Q_STOP_SECONDS = env.float("SAS_Q_STOP_SECONDS", 60, validate=Range(min=0))
SAS_Q_START_SECONDS = env.float("SAS_Q_START_SECONDS", 60, validate=Range(min=0))
SAS_CALLBACK_SECRET = env.str("SAS_CALLBACK_SECRET", "")
# Callbacks and alert webhooks are signed the Standard Webhooks way, each receiver with its own
# secret (supervisor.signing). The former X-SAS-Signature (SAS_CALLBACK_SECRET: one key shared by
# every receiver, no timestamp, so replayable) is deprecated: sent beside only when this is on.
SAS_LEGACY_SIGNATURE = _env_bool("SAS_LEGACY_SIGNATURE", False)
# How long a rotated signing secret still signs beside its successor.
SAS_SIGNING_ROTATION_GRACE_SECONDS = env.float("SAS_SIGNING_ROTATION_GRACE_SECONDS", 24 * 3600)
SAS_METRICS_TOKEN = env.str("SAS_METRICS_TOKEN", "")
SAS_METRICS_SETTLE_SECONDS = env.float("SAS_METRICS_SETTLE_SECONDS", 15)
# How long a web process answers /metrics from the exposition it made last: each one reads the
# database and moves the counters' checkpoint under a row lock, so scrapes in a burst share one.
SAS_METRICS_CACHE_SECONDS = env.float("SAS_METRICS_CACHE_SECONDS", 5, validate=Range(min=0))
SAS_DELIVERY_RETRY_SECONDS = env.float("SAS_DELIVERY_RETRY_SECONDS", 5)
SAS_DELIVERY_TIMEOUT = env.float("SAS_DELIVERY_TIMEOUT", 10, validate=Range(min=0.1))
SAS_DELIVERY_CONCURRENCY = env.int("SAS_DELIVERY_CONCURRENCY", 8, validate=Range(min=1))
# The outbox's lanes and breakers (supervisor.deliveries): threads only alerts take, beside the
# callbacks' SAS_DELIVERY_CONCURRENCY; a receiver's breaker opens after this many failed tries in a
# row, for this long.
SAS_DELIVERY_ALERT_THREADS = env.int("SAS_DELIVERY_ALERT_THREADS", 2, validate=Range(min=1))
SAS_DELIVERY_BREAKER_FAILURES = env.int("SAS_DELIVERY_BREAKER_FAILURES", 5, validate=Range(min=1))
SAS_DELIVERY_BREAKER_OPEN_SECONDS = env.float("SAS_DELIVERY_BREAKER_OPEN_SECONDS", 60, validate=Range(min=0))
# Name lookups of outbound connections (agents.egress): threads per kind of destination (agents,
# callbacks, webhooks), each name looked up once at a time.
SAS_RESOLVER_THREADS = env.int("SAS_RESOLVER_THREADS", 4, validate=Range(min=1))
SAS_TOKEN_LIFETIME_DAYS = env.float("SAS_TOKEN_LIFETIME_DAYS", 90)
# How long the answer to a rerun or bulk action sent with an Idempotency-Key is replayed.
SAS_IDEMPOTENCY_KEY_HOURS = env.float("SAS_IDEMPOTENCY_KEY_HOURS", 24)
# A signal sent by business key to no live job waits this long for a job with that key.
SAS_SIGNAL_LOOKBACK_SECONDS = env.float("SAS_SIGNAL_LOOKBACK_SECONDS", 3600)
# The longest `POST .../signals/?wait=` holds the request for the signal's consumption.
SAS_SIGNAL_WAIT_MAX_SECONDS = env.float("SAS_SIGNAL_WAIT_MAX_SECONDS", 30)
# The at-risk projection reads the step durations measured over this many recent hours, and
# measures them again at most every SAS_SLA_STATS_SECONDS (supervisor.sla).
SAS_SLA_WINDOW_HOURS = env.float("SAS_SLA_WINDOW_HOURS", 24, validate=Range(min=0.01))
SAS_SLA_STATS_SECONDS = env.float("SAS_SLA_STATS_SECONDS", 60, validate=Range(min=0))
# An inbound event is remembered this long: the same source and id again is a duplicate.
SAS_EVENT_RETENTION_HOURS = env.float("SAS_EVENT_RETENTION_HOURS", 168)
SAS_TOKEN_LAST_USED_SECONDS = env.float("SAS_TOKEN_LAST_USED_SECONDS", 60)
# The API's rates (sas_project.throttling): a sustained rate (`100/s`, `1200/min`, `off`) and
# the most requests let through at once, per signed-in user and per anonymous address.
_RATE = Regexp(
    r"^\s*(?:|off|none|[1-9][0-9]*/[smhd][a-z]*)\s*$",
    re.IGNORECASE,
    error="write a rate as 100/s, 1200/min or off",
)
SAS_THROTTLE_USER = env.str("SAS_THROTTLE_USER", "200/s", validate=_RATE)
# Large requests (bodies over SAS_LARGE_REQUEST_BYTES) one user may have served at once
# (sas_project.inflight; 0: no limit).
SAS_LARGE_REQUESTS_PER_USER = env.int("SAS_LARGE_REQUESTS_PER_USER", 1, validate=Range(min=0))
SAS_LARGE_REQUEST_BYTES = env.int("SAS_LARGE_REQUEST_BYTES", 32768, validate=Range(min=0))
# Seconds of input-contract checking per submitter a second, and at once (scheduler.contract_budget).
SAS_CONTRACT_BUDGET = env.float("SAS_CONTRACT_BUDGET", 0.25, validate=Range(min=0))
SAS_CONTRACT_BUDGET_BURST = env.float("SAS_CONTRACT_BUDGET_BURST", 2.0, validate=Range(min=0))
SAS_THROTTLE_USER_BURST = env.int("SAS_THROTTLE_USER_BURST", 1200, validate=Range(min=1))
SAS_THROTTLE_ANON = env.str("SAS_THROTTLE_ANON", "300/min", validate=_RATE)
SAS_THROTTLE_ANON_BURST = env.int("SAS_THROTTLE_ANON_BURST", 60, validate=Range(min=1))
SAS_TRUSTED_PROXIES = env.int("SAS_TRUSTED_PROXIES", 0, validate=Range(min=0))
# History retention (scheduler.services.retention): jobs settled longer ago than this leave the
# hot tables, archived first as gzip JSON Lines under SAS_ARCHIVE_DIR.
SAS_HISTORY_DAYS = env.float("SAS_HISTORY_DAYS", 30, validate=Range(min=0))
SAS_ARCHIVE_DIR = Path(os.environ.get("SAS_ARCHIVE_DIR", VAR_DIR / "archive"))
# Where the archive goes (scheduler.archive): `local`, the folder above on the host of the cluster
# that holds the lease; or `s3`, a bucket of S3-compatible object storage (AWS S3, MinIO, Ceph,
# GCS's XML API...) through django-storages, credentials from boto3's chain (AWS_ACCESS_KEY_ID
# and AWS_SECRET_ACCESS_KEY, a web identity, an instance role). Any other Django storage: define
# STORAGES["archive"] in a settings module of your own.
SAS_ARCHIVE_STORAGE = env.str("SAS_ARCHIVE_STORAGE", "local", validate=OneOf(["local", "s3"]))
SAS_ARCHIVE_S3_BUCKET = env.str("SAS_ARCHIVE_S3_BUCKET", "")
SAS_ARCHIVE_S3_PREFIX = env.str("SAS_ARCHIVE_S3_PREFIX", "sas-archive")
SAS_ARCHIVE_S3_ENDPOINT_URL = env.str("SAS_ARCHIVE_S3_ENDPOINT_URL", "") or None
SAS_ARCHIVE_S3_REGION = env.str("SAS_ARCHIVE_S3_REGION", "") or None
# Seconds to connect and to wait for each answer, per try (two tries): the lease holder's loop
# writes the archive between its scans, and a store that hangs must not hold them up for longer
# than the lease (at worst about 4 x this, under SAS_LEASE_SECONDS).
SAS_ARCHIVE_S3_TIMEOUT = env.float("SAS_ARCHIVE_S3_TIMEOUT", 3, validate=Range(min=0.1))
if SAS_ARCHIVE_STORAGE == "s3":
    if not SAS_ARCHIVE_S3_BUCKET:
        raise ImproperlyConfigured("SAS_ARCHIVE_STORAGE=s3 needs SAS_ARCHIVE_S3_BUCKET, the bucket's name")
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        "archive": s3_archive_storage(
            bucket=SAS_ARCHIVE_S3_BUCKET,
            prefix=SAS_ARCHIVE_S3_PREFIX,
            endpoint_url=SAS_ARCHIVE_S3_ENDPOINT_URL,
            region=SAS_ARCHIVE_S3_REGION,
            timeout=SAS_ARCHIVE_S3_TIMEOUT,
        ),
    }

# The API's request counts are rows in the database (sas_project.throttling), not cache entries.
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "default"},
}

# Alert emails. Without SAS_EMAIL_HOST they are written to the console (development only).
if os.environ.get("SAS_EMAIL_HOST"):
    EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    EMAIL_HOST = os.environ["SAS_EMAIL_HOST"]
    EMAIL_PORT = env.int("SAS_EMAIL_PORT", 587)
    EMAIL_HOST_USER = env.str("SAS_EMAIL_USER", "")
    EMAIL_HOST_PASSWORD = env.str("SAS_EMAIL_PASSWORD", "")
    EMAIL_USE_TLS = _env_bool("SAS_EMAIL_TLS", True)
else:
    EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
DEFAULT_FROM_EMAIL = env.str("SAS_EMAIL_FROM", "scheduler-agent-supervisor@localhost")
# A mail server that does not answer must not hold the supervisor loop.
EMAIL_TIMEOUT = 10

# Logs: one JSON object per line (SAS_LOG_FORMAT=json, the default: what log shippers read), with
# the ids a line is about (job_id, step, operation_id, attempt, pool, endpoint, outcome,
# latency_ms) as fields; `make run` sets SAS_LOG_FORMAT=text for people reading a terminal.
SAS_LOG_FORMAT = env.str("SAS_LOG_FORMAT", "json", validate=OneOf(["json", "text"]))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        },
    },
    # No line carries an attempt's callback token (Django logs the path of every 4xx answer).
    "filters": {"redact": {"()": "sas_project.logredact.RedactCallbackTokens"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json" if SAS_LOG_FORMAT == "json" else "plain",
            "filters": ["redact"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("SAS_LOG_LEVEL", "INFO", validate=LOG_LEVELS)},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # One line per task and per HTTP call is noise next to the events the service records.
        "django-q": {"level": env.str("SAS_Q_LOG_LEVEL", "WARNING", validate=LOG_LEVELS)},
        "httpx": {"level": "WARNING"},
    },
}


# --- start only with a valid environment -----------------------------------------------------

try:
    _env.seal()
except EnvValidationError as exc:
    # environs reports a mapping of variable to messages (a list only for errors of no variable).
    errors_by_name = exc.error_messages if isinstance(exc.error_messages, dict) else {"": exc.error_messages}
    lines = [
        # The value too, unless it may be a secret; each message once (a variable read twice).
        f"  {name}{'' if _SECRET_NAMES.search(name) else '=' + repr(os.environ.get(name, ''))}: "
        + " ".join(dict.fromkeys(errors))
        for name, errors in errors_by_name.items()
    ]
    raise ImproperlyConfigured(
        "the environment holds values the service cannot use; fix them and start again:\n" + "\n".join(lines)
    ) from None


def _placeholder(value: str) -> bool:
    """A value copied from an example and never replaced: the examples' "replace with ..." and
    "<...>" texts, "change me" and the like (deploy/kubernetes/secret.example.yaml, docs)."""
    lowered = value.lower()
    return lowered.startswith(("replace", "<", "changeme", "change me", "change-me")) or " " in value.strip()


def _weak_key(key: str) -> str:
    """Why a secret key is not one of its own ('' when it is): Django's own test of a generated
    key (50 characters or more, 5 different at least), and no example's text."""
    if not key:
        return "not set"
    if key.startswith("django-insecure-"):
        return "a public demo key"
    if _placeholder(key):
        return "an example's placeholder"
    if len(key) < 50 or len(set(key)) < 5:
        return f"too weak ({len(key)} characters, {len(set(key))} different)"
    return ""


if not DEBUG and (_key_fault := _weak_key(SECRET_KEY)):
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is "
        + _key_fault
        + ": with DJANGO_DEBUG off the service needs a secret key of its own (50 random characters "
        "or more: python -c 'import secrets; print(secrets.token_urlsafe(50))'), the same in every "
        "process. `make run` makes one in var/demo-secret-key; DJANGO_DEBUG=1 uses the demo key "
        "on a developer's machine."
    )

for _name in ("SAS_METRICS_TOKEN", "SAS_CALLBACK_SECRET"):
    if not DEBUG and _placeholder(globals()[_name]):
        raise ImproperlyConfigured(
            f"{_name} is an example's placeholder: set a random value of your own "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))'), or none."
        )
