"""One typed, lazily read accessor for the service's own `SAS_*` settings.

Read through this object, never `settings.SAS_...` directly, so that tests can override the
Django settings and see the change at the next read.
"""

from __future__ import annotations

from django.conf import settings


class SasSettings:
    @property
    def supervisor_interval(self) -> float:
        """Seconds between two supervisor scans."""
        return float(getattr(settings, "SAS_SUPERVISOR_INTERVAL", 5))

    @property
    def lease_seconds(self) -> float:
        """How long a supervisor lease lasts without renewal: three scan intervals."""
        return float(getattr(settings, "SAS_LEASE_SECONDS", 3 * self.supervisor_interval))

    @property
    def scan_batch_size(self) -> int:
        """Steps claimed per scan transaction; keeps each lock short."""
        return int(getattr(settings, "SAS_SCAN_BATCH_SIZE", 200))

    @property
    def agent_allowed_hosts(self) -> list[str]:
        """Hosts agent endpoints may target; empty means any host."""
        return list(getattr(settings, "SAS_AGENT_ALLOWED_HOSTS", []))

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


sas_settings = SasSettings()
