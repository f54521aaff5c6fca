"""The supervisor loop: scan every SAS_SUPERVISOR_INTERVAL seconds until told to stop.

Run beside every django-q2 cluster (`manage.py qcluster`) and by `manage.py supervise`. Every
loop scans; the lease decides which one acts.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from django.db import close_old_connections, connection

from sas_project.conf import sas_settings
from scheduler.schedules import schedules_fire
from scheduler.services.retention import ArchiveUnwritable, history_prune_if_due
from supervisor.alerts import archive_failed_alert, reactions_handle, supervisor_stale_check
from supervisor.deliveries import send_due
from supervisor.lease import LeaseGrant, lease_release
from supervisor.scan import scan

logger = logging.getLogger("supervisor")


def holder_name(kind: str) -> str:
    """Who this supervisor is, as shown on the lease and in events."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def run_loop(
    *,
    holder: str,
    should_stop: Callable[[], bool],
    interval: float | None = None,
    max_scans: int | None = None,
) -> int:
    """Scan until `should_stop()`; returns the number of scans. Survives database errors."""
    interval = interval if interval is not None else sas_settings.supervisor_interval
    scans = 0
    last_grant: LeaseGrant | None = None
    logger.info("supervisor %s: scanning every %.1fs", holder, interval)
    while not should_stop() and (max_scans is None or scans < max_scans):
        started = time.monotonic()
        try:
            close_old_connections()
            report = scan(holder=holder)
            scans += 1
            if report.acted:
                last_grant = LeaseGrant(holder=holder, token=report.token or 0)
                if report.remediated or report.lost_lease:
                    logger.info(
                        "supervisor %s: %s", holder, report.figures(), extra={"scan": report.figures()}
                    )
            else:
                last_grant = None
        except Exception:
            # A dropped connection or a database restart must not kill the watchdog: log, drop
            # the connection, and try again at the next interval.
            logger.exception("supervisor %s: scan failed", holder)
            connection.close()
        try:
            # Every loop watches the scans (a stalled supervisor cannot say so itself), sends
            # what the outbox holds and fires the schedules that are due, whether or not its own
            # scan worked.
            supervisor_stale_check(interval)
            while reactions_handle() and not should_stop():
                pass
            send_due()
            schedules_fire()
        except Exception:
            logger.exception("supervisor %s: alerts and deliveries failed", holder)
            connection.close()
        if last_grant is not None:
            try:
                # History retention, once a day, by the lease holder only, a slice per pass.
                try:
                    history_prune_if_due(source=f"supervisor:{holder}")
                except ArchiveUnwritable as exc:
                    # Logged by retention, which backs off; alerted once per run of failures.
                    archive_failed_alert(exc)
            except Exception:
                logger.exception("supervisor %s: history prune failed", holder)
                connection.close()
        remaining = interval - (time.monotonic() - started)
        while remaining > 0 and not should_stop():
            time.sleep(min(remaining, 0.2))
            remaining = interval - (time.monotonic() - started)
    if last_grant is not None:
        try:
            lease_release(last_grant)
        except Exception:
            logger.exception("supervisor %s: could not release the lease", holder)
    return scans
