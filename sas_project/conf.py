"""One typed, lazily read accessor for the service's own `SAS_*` settings.

Read through this object, never `settings.SAS_...` directly, so that tests can override the
Django settings and see the change at the next read.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings


class SasSettings:
    @property
    def supervisor_interval(self) -> float:
        """Seconds between two supervisor scans."""
        return float(getattr(settings, "SAS_SUPERVISOR_INTERVAL", 5))

    @property
    def canary_seconds(self) -> float:
        """Seconds between two canary jobs (supervisor.canary); 0: no canary."""
        return float(getattr(settings, "SAS_CANARY_SECONDS", 0))

    @property
    def canary_base_url(self) -> str:
        """Where the canary's call reaches a web process of this service: SAS_CANARY_URL, else
        SAS_PUBLIC_URL; empty: no canary."""
        return str(getattr(settings, "SAS_CANARY_URL", "") or "").rstrip("/") or self.public_url

    @property
    def cluster_heartbeat_seconds(self) -> float:
        """Seconds between two heartbeats of a cluster (supervisor.heartbeats)."""
        return float(getattr(settings, "SAS_CLUSTER_HEARTBEAT_SECONDS", 10))

    @property
    def lease_seconds(self) -> float:
        """How long a supervisor lease lasts without renewal: three scan intervals."""
        return float(getattr(settings, "SAS_LEASE_SECONDS", 3 * self.supervisor_interval))

    @property
    def schedule_max_failures(self) -> int:
        """Firings in a row that raise before a schedule pauses itself."""
        return int(getattr(settings, "SAS_SCHEDULE_MAX_FAILURES", 5))

    @property
    def quarantine_retry_seconds(self) -> float:
        """How long a loop leaves an item it quarantined alone before trying it again."""
        return float(getattr(settings, "SAS_QUARANTINE_RETRY_SECONDS", 600))

    @property
    def debt_takeover_intervals(self) -> float:
        """Scan intervals the oldest remediation debt may reach under one holder before another
        cluster takes the lease over (supervisor.debt)."""
        return float(getattr(settings, "SAS_DEBT_TAKEOVER_INTERVALS", 3))

    @property
    def scan_batch_size(self) -> int:
        """Steps claimed per scan transaction; keeps each lock short."""
        return int(getattr(settings, "SAS_SCAN_BATCH_SIZE", 200))

    @property
    def agent_allowed_hosts(self) -> list[str]:
        """Hosts agent endpoints (and queue brokers) may target; empty means any host."""
        return list(getattr(settings, "SAS_AGENT_ALLOWED_HOSTS", []))

    @property
    def callback_allowed_hosts(self) -> list[str]:
        """Hosts jobs' completion callbacks may target; empty means any host."""
        return list(getattr(settings, "SAS_CALLBACK_ALLOWED_HOSTS", []))

    @property
    def webhook_allowed_hosts(self) -> list[str]:
        """Hosts alert subscriptions' webhooks may target; empty means any host."""
        return list(getattr(settings, "SAS_WEBHOOK_ALLOWED_HOSTS", []))

    @property
    def python_agents(self) -> list[str]:
        """The callables python steps may call (dotted paths; `module.*` for a whole module)."""
        return list(getattr(settings, "SAS_PYTHON_AGENTS", []))

    @property
    def public_url(self) -> str:
        """The base URL at which remotes reach this service (for the callback URL of HTTP calls);
        empty: no callback URL is sent."""
        return str(getattr(settings, "SAS_PUBLIC_URL", "") or "").rstrip("/")

    @property
    def callback_token_max_age(self) -> float:
        """How long after its call a result may still be POSTed to an attempt's callback URL."""
        return float(getattr(settings, "SAS_CALLBACK_TOKEN_MAX_AGE", 7 * 24 * 3600))

    @property
    def reply_queue(self) -> str:
        """The queue the remotes of queue pools reply on (on each broker)."""
        return str(getattr(settings, "SAS_REPLY_QUEUE", "sas.replies"))

    @property
    def reply_max_tries(self) -> int:
        """How many times the reply consumer tries to record a reply while its database answers
        before the reply goes to the dead-letter queue (`<reply queue>.dead`)."""
        return max(1, int(getattr(settings, "SAS_REPLY_MAX_TRIES", 5)))

    @property
    def broker_ca_file(self) -> str:
        """A PEM file of the certificate authorities that sign `rediss://` and `amqps://` brokers'
        certificates; empty: the system's trust store."""
        return str(getattr(settings, "SAS_BROKER_CA_FILE", "") or "")

    @property
    def replies_in_cluster(self) -> bool:
        """Whether `qcluster` runs the consumer of queue pools' replies beside the cluster."""
        return bool(getattr(settings, "SAS_REPLIES_IN_CLUSTER", True))

    @property
    def outbound_internal_hosts(self) -> list[str]:
        """Hosts (`host`, `host:port`), addresses and networks that agent endpoints and queue
        brokers may reach although they are internal (loopback, private, link-local...); see
        agents.validation."""
        return list(getattr(settings, "SAS_OUTBOUND_INTERNAL_HOSTS", []))

    @property
    def callback_internal_hosts(self) -> list[str]:
        """The same for jobs' completion callbacks."""
        return list(getattr(settings, "SAS_CALLBACK_INTERNAL_HOSTS", []))

    @property
    def webhook_internal_hosts(self) -> list[str]:
        """The same for alert subscriptions' webhooks."""
        return list(getattr(settings, "SAS_WEBHOOK_INTERNAL_HOSTS", []))

    @property
    def supervisor_in_cluster(self) -> bool:
        """Whether `qcluster` runs the supervisor loop beside the django-q2 cluster."""
        return bool(getattr(settings, "SAS_SUPERVISOR_IN_CLUSTER", True))

    @property
    def response_excerpt_bytes(self) -> int:
        """How much of a remote's answer an attempt keeps."""
        return int(getattr(settings, "SAS_RESPONSE_EXCERPT_BYTES", 2048))

    @property
    def max_response_bytes(self) -> int:
        """Largest answer an agent reads from a remote; a larger one is a transient failure."""
        return int(getattr(settings, "SAS_MAX_RESPONSE_BYTES", 1024 * 1024))

    @property
    def health_window(self) -> int:
        """Recent finished attempts per endpoint that the circuit breaker looks at."""
        return int(getattr(settings, "SAS_HEALTH_WINDOW", 10))

    @property
    def health_cooldown_seconds(self) -> float:
        """How long an unhealthy endpoint is skipped."""
        return float(getattr(settings, "SAS_HEALTH_COOLDOWN_SECONDS", 30))

    @property
    def q_continue(self) -> int:
        """How many of a job's next attempts a worker takes from the queue after a success and
        delivers itself (scheduler.services.hotpath.take_next); 0: each through the queue."""
        return max(int(getattr(settings, "SAS_Q_CONTINUE", 8)), 0)

    @property
    def q_stop_seconds(self) -> float:
        """How long `qcluster` waits for its processes to stop before it kills them."""
        return float(getattr(settings, "SAS_Q_STOP_SECONDS", 60))

    @property
    def callback_secret(self) -> str:
        """The key completion callbacks and alert webhooks are signed with (X-SAS-Signature).
        Receivers verify with the same value; without one set, a key derived from SECRET_KEY."""
        secret = str(getattr(settings, "SAS_CALLBACK_SECRET", "") or "")
        if secret:
            return secret
        import hashlib

        return hashlib.sha256(f"sas-callbacks:{settings.SECRET_KEY}".encode()).hexdigest()

    @property
    def legacy_signature(self) -> bool:
        """Whether callbacks and alert webhooks still carry the former X-SAS-Signature (one key
        for every receiver, no timestamp) beside the Standard Webhooks headers; for one release,
        while receivers move over."""
        return bool(getattr(settings, "SAS_LEGACY_SIGNATURE", True))

    @property
    def signing_rotation_grace_seconds(self) -> float:
        """How long a rotated signing secret still signs, beside its successor."""
        return float(getattr(settings, "SAS_SIGNING_ROTATION_GRACE_SECONDS", 24 * 3600))

    @property
    def delivery_retry_seconds(self) -> float:
        """Wait before the second try of a callback or alert; it doubles at each try (an hour
        at most)."""
        return float(getattr(settings, "SAS_DELIVERY_RETRY_SECONDS", 5))

    @property
    def delivery_timeout(self) -> float:
        """Wall-clock deadline of one send of a callback or webhook, connecting included."""
        return float(getattr(settings, "SAS_DELIVERY_TIMEOUT", 10))

    @property
    def delivery_concurrency(self) -> int:
        """Messages a supervisor process sends at once, beside its loop."""
        return max(int(getattr(settings, "SAS_DELIVERY_CONCURRENCY", 8)), 1)

    @property
    def delivery_alert_threads(self) -> int:
        """Threads of a supervisor process's sender that only alerts take, beside the callbacks'
        (`delivery_concurrency`); alerts take free callback threads too, and go first."""
        return max(int(getattr(settings, "SAS_DELIVERY_ALERT_THREADS", 2)), 1)

    @property
    def delivery_breaker_failures(self) -> int:
        """Failed tries in a row to one receiver that open its circuit breaker."""
        return max(int(getattr(settings, "SAS_DELIVERY_BREAKER_FAILURES", 5)), 1)

    @property
    def delivery_breaker_open_seconds(self) -> float:
        """How long an open breaker keeps its receiver's messages waiting before one probe."""
        return max(float(getattr(settings, "SAS_DELIVERY_BREAKER_OPEN_SECONDS", 60)), 0.0)

    @property
    def resolver_threads(self) -> int:
        """Name lookups in flight at once per kind of destination (agents, callbacks, webhooks)."""
        return max(int(getattr(settings, "SAS_RESOLVER_THREADS", 4)), 1)

    @property
    def metrics_settle_seconds(self) -> float:
        """How far the /metrics counters trail the event history, so that a transaction that
        commits a little after it started is not skipped."""
        return float(getattr(settings, "SAS_METRICS_SETTLE_SECONDS", 15))

    @property
    def metrics_token(self) -> str:
        """When set, /metrics wants `Authorization: Bearer <token>`."""
        return str(getattr(settings, "SAS_METRICS_TOKEN", "") or "")

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

    @property
    def schedules_per_user(self) -> int:
        """The most schedules one user may own (each fires as that user, outside the API's request
        rates); 0: no limit."""
        return int(getattr(settings, "SAS_SCHEDULES_PER_USER", 50))

    @property
    def trusted_proxies(self) -> int:
        """How many proxies (load balancers) stand in front of the web processes; their
        X-Forwarded-For entries name the client (sas_project.throttling.client_ip)."""
        return int(getattr(settings, "SAS_TRUSTED_PROXIES", 0))

    @property
    def idempotency_key_hours(self) -> float:
        """How long the answer to a rerun or bulk action sent with an Idempotency-Key is kept."""
        return float(getattr(settings, "SAS_IDEMPOTENCY_KEY_HOURS", 24))

    @property
    def token_lifetime_days(self) -> float:
        """How long an API token lives (the longest a user may choose); 0: tokens never expire."""
        return float(getattr(settings, "SAS_TOKEN_LIFETIME_DAYS", 90))

    @property
    def token_last_used_seconds(self) -> float:
        """How stale a token's recorded last use may get before a request writes it again: one
        write per token per interval, not one per request."""
        return float(getattr(settings, "SAS_TOKEN_LAST_USED_SECONDS", 60))

    @property
    def max_batch_jobs(self) -> int:
        """The most jobs one `POST /api/v1/jobs/batch/` may submit."""
        return int(getattr(settings, "SAS_MAX_BATCH_JOBS", 100))

    @property
    def history_days(self) -> float:
        """Jobs settled longer ago than this many days are archived and leave the hot tables;
        0 turns retention off."""
        return float(getattr(settings, "SAS_HISTORY_DAYS", 30))

    @property
    def archive_dir(self) -> Path:
        """The local archive store's folder (`jobs-YYYY-MM-DD/` of objects), SAS_ARCHIVE_STORAGE=local."""
        return Path(getattr(settings, "SAS_ARCHIVE_DIR", Path(settings.VAR_DIR) / "archive"))


sas_settings = SasSettings()
