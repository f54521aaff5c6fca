"""`manage.py supervise`: run the supervisor loop as its own process."""

from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from supervisor.loop import holder_name, run_loop
from supervisor.scan import scan


class Command(BaseCommand):
    help = "Run the supervisor scan every SAS_SUPERVISOR_INTERVAL seconds (or once with --once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=None, help="Seconds between scans.")
        parser.add_argument("--once", action="store_true", help="Run one scan, print it and exit.")

    def handle(self, *args: Any, **options: Any) -> None:
        holder = holder_name("supervise")
        if options["once"]:
            report = scan(holder=holder)
            self.stdout.write(f"acted={report.acted} {report.figures()}")
            return
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        run_loop(holder=holder, should_stop=lambda: stopping, interval=options["interval"])
