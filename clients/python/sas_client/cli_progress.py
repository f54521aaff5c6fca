"""What `sas` says on stderr while a long command runs: a wait's and a batch's progress, and each
retry as it happens.

On a terminal, progress is one line redrawn in place (a bar or counters); anywhere else (a pipe, a
CI log) it is plain lines, one per change, so that a log reads well. Retries are always a line of
their own: `sas: retrying in 2.1 s (attempt 2 of 5): 503 GET /api/v1/jobs/...`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from sas_client.calls import SETTLED, BatchProgress, Json
from sas_client.transport import RetryEvent, RetryHook

BAR_WIDTH = 24


def bar(done: int, total: int, width: int = BAR_WIDTH) -> str:
    """`[#########---------------]`: `done` of `total` as a bar of `width` cells."""
    filled = width if total <= 0 else min(width, done * width // total)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class Status:
    """stderr as the commands' status area: `show` redraws the one live line on a terminal and
    writes a line elsewhere; `say` writes a line of its own (ending the live line first)."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.tty = bool(getattr(err, "isatty", lambda: False)())
        self.live = False

    def show(self, text: str) -> None:
        if self.tty:
            self.err.write("\r\x1b[K" + text)
            self.live = True
        else:
            self.err.write(text + "\n")
        self.err.flush()

    def say(self, text: str) -> None:
        self.end()
        self.err.write(text + "\n")
        self.err.flush()

    def end(self) -> None:
        """Close the live line, if one is drawn."""
        if self.live:
            self.err.write("\n")
            self.err.flush()
            self.live = False


def retry_notice(status: Status) -> RetryHook:
    """An `on_retry` hook: a line on stderr for each retry, as it is about to wait."""

    def notice(event: RetryEvent) -> None:
        request = event.request
        status.say(
            f"sas: {event.describe()} {request.method} {request.url.raw_path.decode(errors='replace')}"
        )

    return notice


def job_progress(status: Status) -> Callable[[Json], None]:
    """A `progress` hook for `wait`: on a terminal, the job's status and a bar of its settled
    steps redrawn in place; elsewhere a line (`<id> <status> name=status ...`) each time the job's
    or a step's status changes."""
    last: list[str] = []

    def report(job: Json) -> None:
        steps = job.get("steps") or []
        if status.tty:
            done = sum(1 for s in steps if s.get("status") in {"succeeded", "skipped", "compensated"})
            waiting = [s["name"] for s in steps if s.get("status") not in SETTLED | {"pending", "skipped"}]
            now = f" ({', '.join(waiting)})" if waiting else ""
            line = f"{job['id']} {job['status']} {bar(done, len(steps))} {done}/{len(steps)} steps{now}"
        else:
            named = " ".join(f"{s['name']}={s['status']}" for s in steps)
            line = f"{job['id']} {job['status']} {named}".rstrip()
        if [line] != last:
            last[:] = [line]
            status.show(line)
        if job["status"] in SETTLED:
            status.end()

    return report


def batch_progress(status: Status) -> BatchProgress:
    """A `progress` hook for `submit_batch`: jobs answered so far, of how many."""

    def report(done: int, total: int) -> None:
        if status.tty:
            status.show(f"submitting {bar(done, total)} {done}/{total} jobs")
            if done >= total:
                status.end()
        else:
            status.show(f"sas: {done} of {total} jobs sent")

    return report
