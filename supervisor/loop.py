"""The supervisor loop: scan every SAS_SUPERVISOR_INTERVAL seconds until told to stop.

Run beside every django-q2 cluster (`manage.py qcluster`) and by `manage.py supervise`. Every
loop scans; the lease decides which one acts.

Nothing in a pass waits on a remote: the outbox is sent by the loop's `deliveries.Sender`
threads, which the loop feeds with what is due (at each pass, and while it sleeps when more is
due than its threads took). Each pass's duration, all its work included, goes with the next
scan's figures (`pass_ms`, and the longest since this loop started, `longest_pass_ms`: /metrics'
`sas_supervisor_pass_seconds` and `sas_supervisor_longest_pass_seconds`); a pass that takes more
than `SLOW_PASS` intervals is logged as a warning.
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
from sas_project.idempotency import idempotent_requests_prune
from sas_project.throttling import rate_buckets_prune
from scheduler.schedules import schedules_fire
from scheduler.services.events import inbound_events_prune
from scheduler.services.retention import ArchiveUnwritable, history_prune_if_due
from supervisor.alerts import (
    archive_failed_alert,
    keyed_signals_expire_and_alert,
    quarantines_alert,
    reactions_handle,
    supervisor_stale_check,
)
from supervisor.canary import canary_tick
from supervisor.debt import debt_watch
from supervisor.deliveries import Sender
from supervisor.lease import LeaseGrant, lease_release
from supervisor.scan import scan
from supervisor.sweeps import gates_tick

logger = logging.getLogger("supervisor")

#: A pass longer than this many intervals is logged as a warning (the lease lasts three).
SLOW_PASS = 2.0
#: Between two passes the loop wakes this often (seconds): to hand more deliveries over and, on
#: the lease holder, to pass the debounce and throttle gates that opened (one read of
#: job_start_gate_idx when none did).
TICK = 0.2
#: How often the lease holder deletes the API's idle rate buckets.
RATE_PRUNE_SECONDS = 60.0


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
    """Scan until `should_stop()`; returns the number of scans. Survives database errors. On
    stop it waits for the sends in flight (each over by SAS_DELIVERY_TIMEOUT)."""
    interval = interval if interval is not None else sas_settings.supervisor_interval
    sender = Sender()
    try:
        return _passes(holder, should_stop, interval, max_scans, sender)
    finally:
        sender.stop()
        connection.close()


def _passes(
    holder: str, should_stop: Callable[[], bool], interval: float, max_scans: int | None, sender: Sender
) -> int:
    scans = 0
    last_grant: LeaseGrant | None = None
    pass_ms = longest_ms = 0
    next_rate_prune = time.monotonic()
    logger.info("supervisor %s: scanning every %.1fs", holder, interval)
    while not should_stop() and (max_scans is None or scans < max_scans):
        started = time.monotonic()
        try:
            close_old_connections()
            report = scan(holder=holder, pass_ms=pass_ms, longest_pass_ms=longest_ms)
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
        # Every loop watches the scans (a stalled supervisor cannot say so itself) and the debt
        # of remediation (judged from the step rows, not from the holder's word: a holder that
        # renews but leaves work undone is taken over, supervisor.debt), sends what the outbox
        # holds and fires the schedules that are due, whether or not its own scan worked. Each
        # chore on its own: one that fails stops none of the others.
        _chore(holder, "the stale-scan check", lambda: supervisor_stale_check(interval))
        _chore(holder, "the remediation debt check", lambda: debt_watch(holder=holder, interval=interval))
        _chore(holder, "alerts", lambda: _reactions(should_stop))
        _chore(holder, "quarantine alerts", quarantines_alert)
        _chore(holder, "deliveries", sender.pump)
        _chore(holder, "schedules", schedules_fire)
        _chore(holder, "the canary", canary_tick)
        _chore(holder, "signals by key past their lookback", keyed_signals_expire_and_alert)
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
            if time.monotonic() >= next_rate_prune:
                next_rate_prune = time.monotonic() + RATE_PRUNE_SECONDS
                try:
                    rate_buckets_prune()
                    idempotent_requests_prune()
                    inbound_events_prune()
                except Exception:
                    logger.exception(
                        "supervisor %s: rate buckets, idempotency keys and events prune failed", holder
                    )
                    connection.close()
        took = time.monotonic() - started
        pass_ms = int(took * 1000)
        longest_ms = max(longest_ms, pass_ms)
        if took > SLOW_PASS * interval and took > 1:
            logger.warning(
                "supervisor %s: a pass took %.1fs, the interval is %.1fs",
                holder,
                took,
                interval,
                extra={"pass_ms": pass_ms, "interval": interval},
            )
        remaining = interval - (time.monotonic() - started)
        while remaining > 0 and not should_stop():
            time.sleep(min(remaining, TICK))
            _send_more(holder, sender)
            if last_grant is not None:
                last_grant = _gates_tick(holder, last_grant)
            remaining = interval - (time.monotonic() - started)
    if last_grant is not None:
        try:
            lease_release(last_grant)
        except Exception:
            logger.exception("supervisor %s: could not release the lease", holder)
    return scans


def _chore(holder: str, what: str, chore: Callable[[], object]) -> object:
    """Run one of the loop's chores; one that raises is logged and the connection dropped (a
    database restart), and the loop goes on."""
    try:
        return chore()
    except Exception:
        logger.exception("supervisor %s: %s failed", holder, what)
        connection.close()
        return None


def _gates_tick(holder: str, grant: LeaseGrant) -> LeaseGrant | None:
    """Between passes, on the lease holder: start the debounced and throttled jobs whose time
    came (supervisor.sweeps.gates_tick). The grant, or None (no more ticks till the next pass)
    once the lease was lost or the tick failed."""
    try:
        report = gates_tick(grant)
    except Exception:
        # Not again before the next pass: a database that is down is logged once per interval.
        logger.exception("supervisor %s: the gates' tick failed", holder)
        connection.close()
        return None
    if report.remediated:
        logger.info("supervisor %s: %s", holder, report.decisions, extra={"scan": report.figures()})
    return None if report.lost_lease else grant


def _reactions(should_stop: Callable[[], bool]) -> None:
    while reactions_handle() and not should_stop():
        pass


def _send_more(holder: str, sender: Sender) -> None:
    """Between passes: when more was due than the sender took, hand it over as threads free up."""
    if not sender.more_due or sender.free() <= 0:
        return
    try:
        sender.pump()
    except Exception:
        logger.exception("supervisor %s: deliveries failed", holder)
        connection.close()
