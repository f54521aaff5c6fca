"""`manage.py cluster_check [--name HOST:PID]`: exit 0 when a cluster of this host (or the named
one) beat recently, 1 otherwise, saying why: a container's liveness probe for `qcluster`
(supervisor.heartbeats). It reads the heartbeat rows, so it also fails while the database is
unreachable: give the probe a failure threshold longer than a database restart."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from scheduler.unit import db_now
from supervisor.heartbeats import check


class Command(BaseCommand):
    help = "Exit 0 when a cluster of this host (or --name) beat recently, 1 otherwise."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default=None, help="The cluster's heartbeat name, host:pid.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            ok, reason = check(db_now(), name=options["name"])
        except DatabaseError as exc:
            raise CommandError(f"the database is unreachable: {type(exc).__name__}") from exc
        if not ok:
            raise CommandError(reason)
        self.stdout.write(reason)
