"""`manage.py history_restore FILE... [--job ID]`: load archived jobs back into the tables."""

from __future__ import annotations

import uuid
from itertools import chain
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sas_project.conf import sas_settings
from scheduler.archive import archive_restore, read_archive


class Command(BaseCommand):
    help = "Load jobs archived by history_prune back into the tables (jobs already there are skipped)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "files", nargs="+", help="Archive files (a bare name is looked up in SAS_ARCHIVE_DIR)."
        )
        parser.add_argument("--job", action="append", default=None, help="Only this job id (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        paths = []
        for name in options["files"]:
            path = Path(name)
            if not path.exists() and (sas_settings.archive_dir / name).exists():
                path = sas_settings.archive_dir / name
            if not path.exists():
                raise CommandError(f"no archive file {name}")
            paths.append(path)
        try:
            wanted = {uuid.UUID(j) for j in options["job"]} if options["job"] else None
            loaded = archive_restore(chain.from_iterable(read_archive(p) for p in paths), job_ids=wanted)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"history_restore: {len(loaded)} jobs loaded back")
