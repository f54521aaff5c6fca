"""One typed, lazily read accessor for the service's own `SAS_*` settings.

Read through this object, never `settings.SAS_...` directly, so that tests can override the
Django settings and see the change at the next read.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from django.conf import settings

T = TypeVar("T")
N = TypeVar("N", int, float)


class _Setting(Generic[T]):
    """One `SAS_<NAME>` setting, named by the attribute it is assigned to: read from Django's
    settings at every access (so an override shows at the next read), `default` when unset, and
    made a `T` by `read`."""

    def __init__(self, read: Callable[[Any], T], default: Any) -> None:
        self.read = read
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = f"SAS_{name.upper()}"

    @overload
    def __get__(self, instance: None, owner: type) -> _Setting[T]: ...

    @overload
    def __get__(self, instance: object, owner: type) -> T: ...

    def __get__(self, instance: object | None, owner: type) -> _Setting[T] | T:
        if instance is None:
            return self
        return self.read(getattr(settings, self.name, self.default))


def _strings(value: Any) -> list[str]:
    return list(value)


def _text(value: Any) -> str:
    """A string setting that may be set to None (empty)."""
    return str(value or "")


def _url(value: Any) -> str:
    """A base URL, without its trailing slash."""
    return str(value or "").rstrip("/")


def _at_least(read: Callable[[Any], N], low: N) -> Callable[[Any], N]:
    """`read`, raised to `low` when below it."""

    def bounded(value: Any) -> N:
        return max(read(value), low)

    return bounded


class SasSettings:
    """Each plain setting is one `_Setting` line (its name gives the `SAS_*` name); a property
    where the value depends on another setting or is derived."""

    #: Seconds between two supervisor scans.
    supervisor_interval = _Setting(float, 5)

    #: Seconds between two canary jobs (supervisor.canary); 0: no canary.
    canary_seconds = _Setting(float, 0)

    @property
    def canary_base_url(self) -> str:
        """Where the canary's call reaches a web process of this service: SAS_CANARY_URL, else
        SAS_PUBLIC_URL; empty: no canary."""
        return _url(getattr(settings, "SAS_CANARY_URL", "")) or self.public_url

    #: Seconds between two heartbeats of a cluster (supervisor.heartbeats).
    cluster_heartbeat_seconds = _Setting(float, 10)

    @property
    def cluster_alive_file(self) -> Path:
        """The file a cluster touches at every heartbeat (docker/entrypoint alive reads its age)."""
        return Path(getattr(settings, "SAS_CLUSTER_ALIVE_FILE", Path(settings.VAR_DIR) / "cluster-alive"))

    @property
    def lease_seconds(self) -> float:
        """How long a supervisor lease lasts without renewal: three scan intervals."""
        return float(getattr(settings, "SAS_LEASE_SECONDS", 3 * self.supervisor_interval))

    #: Firings in a row that raise before a schedule pauses itself.
    schedule_max_failures = _Setting(int, 5)

    #: The most fire times one backfill of a schedule may cover.
    schedule_backfill_max = _Setting(int, 1000)

    #: How long a loop leaves an item it quarantined alone before trying it again.
    quarantine_retry_seconds = _Setting(float, 600)

    #: Scan intervals the oldest remediation debt may reach under one holder before another cluster
    #: takes the lease over (supervisor.debt).
    debt_takeover_intervals = _Setting(float, 3)

    #: Steps claimed per scan transaction; keeps each lock short.
    scan_batch_size = _Setting(int, 200)

    #: Hosts agent endpoints (and queue brokers) may target; empty means any host.
    agent_allowed_hosts = _Setting(_strings, [])

    #: Hosts jobs' completion callbacks may target; empty means any host.
    callback_allowed_hosts = _Setting(_strings, [])

    #: Hosts alert subscriptions' webhooks may target; empty means any host.
    webhook_allowed_hosts = _Setting(_strings, [])

    #: The callables python steps may call (dotted paths; `module.*` for a whole module).
    python_agents = _Setting(_strings, [])

    #: The base URL at which remotes reach this service (for the callback URL of HTTP calls); empty:
    #: no callback URL is sent.
    public_url = _Setting(_url, "")

    #: How long after its call a result may still be POSTed to an attempt's callback URL.
    callback_token_max_age = _Setting(float, 7 * 24 * 3600)

    #: The queue the remotes of queue pools reply on (on each broker).
    reply_queue = _Setting(str, "sas.replies")

    #: How many times the reply consumer tries to record a reply while its database answers before
    #: the reply goes to the dead-letter queue (`<reply queue>.dead`).
    reply_max_tries = _Setting(_at_least(int, 1), 5)

    #: A PEM file of the certificate authorities that sign `rediss://` and `amqps://` brokers'
    #: certificates; empty: the system's trust store.
    broker_ca_file = _Setting(_text, "")

    #: Whether `qcluster` runs the consumer of queue pools' replies beside the cluster.
    replies_in_cluster = _Setting(bool, True)

    #: Hosts (`host`, `host:port`), addresses and networks that agent endpoints and queue brokers
    #: may reach although they are internal (loopback, private, link-local...); see
    #: agents.validation.
    outbound_internal_hosts = _Setting(_strings, [])

    #: The same for jobs' completion callbacks.
    callback_internal_hosts = _Setting(_strings, [])

    #: The same for alert subscriptions' webhooks.
    webhook_internal_hosts = _Setting(_strings, [])

    #: Whether `qcluster` runs the supervisor loop beside the django-q2 cluster.
    supervisor_in_cluster = _Setting(bool, True)

    #: How much of a remote's answer an attempt keeps.
    response_excerpt_bytes = _Setting(int, 2048)

    #: Largest answer an agent reads from a remote; a larger one is a transient failure.
    max_response_bytes = _Setting(int, 1024 * 1024)

    #: Recent finished attempts per endpoint that the circuit breaker looks at.
    health_window = _Setting(int, 10)

    #: How long an unhealthy endpoint is skipped.
    health_cooldown_seconds = _Setting(float, 30)

    #: How many of a job's next attempts a worker takes from the queue after a success and delivers
    #: itself (scheduler.services.hotpath.take_next); 0: each through the queue.
    q_continue = _Setting(_at_least(int, 0), 8)

    #: How long `qcluster` waits for its processes to stop before it kills them.
    q_stop_seconds = _Setting(float, 60)

    #: How long `qcluster` keeps starting its cluster again while the database is away.
    q_start_seconds = _Setting(float, 60)

    @property
    def callback_secret(self) -> str:
        """The key completion callbacks and alert webhooks are signed with (X-SAS-Signature).
        Receivers verify with the same value; without one set, a key derived from SECRET_KEY."""
        secret = str(getattr(settings, "SAS_CALLBACK_SECRET", "") or "")
        if secret:
            return secret
        import hashlib

        return hashlib.sha256(f"sas-callbacks:{settings.SECRET_KEY}".encode()).hexdigest()

    #: Whether callbacks and alert webhooks also carry the former, deprecated X-SAS-Signature
    #: (one key for every receiver, no timestamp) beside the Standard Webhooks headers: off
    #: unless asked for, for receivers not moved over yet.
    legacy_signature = _Setting(bool, False)

    #: How long a rotated signing secret still signs, beside its successor.
    signing_rotation_grace_seconds = _Setting(float, 24 * 3600)

    #: Wait before the second try of a callback or alert; it doubles at each try (an hour at most).
    delivery_retry_seconds = _Setting(float, 5)

    #: Wall-clock deadline of one send of a callback or webhook, connecting included.
    delivery_timeout = _Setting(float, 10)

    #: Messages a supervisor process sends at once, beside its loop.
    delivery_concurrency = _Setting(_at_least(int, 1), 8)

    #: Threads of a supervisor process's sender that only alerts take, beside the callbacks'
    #: (`delivery_concurrency`); alerts take free callback threads too, and go first.
    delivery_alert_threads = _Setting(_at_least(int, 1), 2)

    #: Failed tries in a row to one receiver that open its circuit breaker.
    delivery_breaker_failures = _Setting(_at_least(int, 1), 5)

    #: How long an open breaker keeps its receiver's messages waiting before one probe.
    delivery_breaker_open_seconds = _Setting(_at_least(float, 0.0), 60)

    #: Name lookups in flight at once per kind of destination (agents, callbacks, webhooks).
    resolver_threads = _Setting(_at_least(int, 1), 4)

    #: How far the /metrics counters trail the event history, so that a transaction that commits a
    #: little after it started is not skipped.
    metrics_settle_seconds = _Setting(float, 15)

    #: When set, /metrics wants `Authorization: Bearer <token>`.
    metrics_token = _Setting(_text, "")
    #: How long a process answers /metrics from its last exposition (0: a new one each time).
    metrics_cache_seconds = _Setting(float, 5)

    @property
    def throttle_rates(self) -> dict[str, str]:
        """API rates, sustained (`100/s`, `1200/min`; `off` for none): `user` per signed-in user,
        `anon` per client address for anonymous requests."""
        return {
            "user": str(getattr(settings, "SAS_THROTTLE_USER", "200/s")),
            "anon": str(getattr(settings, "SAS_THROTTLE_ANON", "300/min")),
        }

    @property
    def throttle_bursts(self) -> dict[str, int]:
        """The most requests of `user` and `anon` let through at once, above the sustained rate."""
        return {
            "user": int(getattr(settings, "SAS_THROTTLE_USER_BURST", 1200)),
            "anon": int(getattr(settings, "SAS_THROTTLE_ANON_BURST", 60)),
        }

    #: Requests with a body over `large_request_bytes` one user may have served at once, across
    #: the web processes (sas_project.inflight; 0: no limit).
    large_requests_per_user = _Setting(int, 1)
    large_request_bytes = _Setting(int, 32768)

    #: Seconds of input-contract checking a submitter may spend a second, sustained, in the web
    #: tier (scheduler.contract_budget; 0: no budget), and at once, above it.
    contract_budget = _Setting(float, 0.25)
    contract_budget_burst = _Setting(float, 2.0)

    #: The most schedules one user may own (each fires as that user, outside the API's request
    #: rates); 0: no limit.
    schedules_per_user = _Setting(int, 50)

    #: How many proxies (load balancers) stand in front of the web processes; their X-Forwarded-For
    #: entries name the client (sas_project.throttling.client_ip).
    trusted_proxies = _Setting(int, 0)

    #: How long the answer to a rerun or bulk action sent with an Idempotency-Key is kept.
    idempotency_key_hours = _Setting(float, 24)

    #: How long a signal sent by business key that reached no live job is kept for a job with that
    #: key that starts (scheduler.services.correlation).
    signal_lookback_seconds = _Setting(float, 3600)

    #: The at-risk projection's window: the step durations measured over this many recent hours
    #: (supervisor.sla).
    sla_window_hours = _Setting(float, 24)

    #: How long the scan keeps a workflow's measured step durations before measuring them again.
    sla_stats_seconds = _Setting(float, 60)

    #: The longest a signal's sender may wait for its consumption (`?wait=` on a job's signals).
    signal_wait_max_seconds = _Setting(float, 30)

    #: How long an inbound event's row (and its answer) is kept: the same source and id posted
    #: again within it is a duplicate (scheduler.services.events).
    event_retention_hours = _Setting(float, 168)

    #: How long an API token lives (the longest a user may choose); 0: tokens never expire.
    token_lifetime_days = _Setting(float, 90)

    #: How stale a token's recorded last use may get before a request writes it again: one write per
    #: token per interval, not one per request.
    token_last_used_seconds = _Setting(float, 60)

    #: The most jobs one `POST /api/v1/jobs/batch/` may submit.
    max_batch_jobs = _Setting(int, 100)

    #: Jobs settled longer ago than this many days are archived and leave the hot tables; 0 turns
    #: retention off.
    history_days = _Setting(float, 30)

    @property
    def archive_dir(self) -> Path:
        """The local archive store's folder (`jobs-YYYY-MM-DD/` of objects), SAS_ARCHIVE_STORAGE=local."""
        return Path(getattr(settings, "SAS_ARCHIVE_DIR", Path(settings.VAR_DIR) / "archive"))


sas_settings = SasSettings()
