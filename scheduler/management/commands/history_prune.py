"""`manage.py history_prune [--dry-run] [--archive-only]`: archive the settled jobs not yet
archived, then delete the jobs settled more than SAS_HISTORY_DAYS days ago (the supervisor loop
archives at every pass and deletes once a day)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from scheduler.services.retention import BATCH_SIZE, history_prune


class Command(BaseCommand):
    help = "Archive (gzip JSON Lines in SAS_ARCHIVE_DIR) and delete jobs settled before the retention period."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count what would go; change nothing.")
        parser.add_argument(
            "--archive-only",
            action="store_true",
            help="Only write the settled jobs not yet archived to the archive; delete nothing.",
        )
        parser.add_argument("--days", type=float, default=None, help="Override SAS_HISTORY_DAYS.")
        parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="Jobs per transaction.")
        parser.add_argument(
            "--pause", type=float, default=0.0, help="Seconds to wait between batches (a gentler pace)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = history_prune(
            source="command",
            dry_run=options["dry_run"],
            archive_only=options["archive_only"],
            days=options["days"],
            batch_size=options["batch_size"],
            pause=options["pause"],
        )
        if report.dry_run:
            summary = f"would delete {report.jobs} jobs"
        else:
            summary = f"archived {report.archived} jobs, deleted {report.jobs} jobs"
        self.stdout.write(f"history_prune: {summary} settled before {report.cutoff:%Y-%m-%d %H:%M} UTC")
        self.stdout.write(json.dumps(report.figures(), indent=2))
