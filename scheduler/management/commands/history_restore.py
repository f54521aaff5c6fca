"""`manage.py history_restore [NAME...] [--day YYYY-MM-DD...] [--job ID]`: load archived jobs back
into the tables, from the archive store (SAS_ARCHIVE_STORAGE) or from files on this host."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler import archive


def _day(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value.removeprefix("jobs-"))
    except ValueError as exc:
        raise CommandError(f"--day {value!r} is not a date (YYYY-MM-DD)") from exc


class Command(BaseCommand):
    help = (
        "Load jobs archived by history_prune back into the tables: every object of a settle day, "
        "or named objects or files (jobs already there are skipped)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "names",
            nargs="*",
            help="Archive objects by name (as the API's 410 names them), or archive files on this host.",
        )
        parser.add_argument(
            "--day",
            action="append",
            default=[],
            help="Every archive object of this settle day, YYYY-MM-DD in UTC (repeatable).",
        )
        parser.add_argument("--job", action="append", default=None, help="Only this job id (repeatable).")
        parser.add_argument(
            "--list", action="store_true", help="List the objects that would be read; load nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["names"] and not options["day"]:
            raise CommandError("name archive objects or files, or --day YYYY-MM-DD")
        store = archive.archive_storage()
        where = archive.describe_storage(store)
        sources: list[tuple[str, Path | None]] = []
        for day in (_day(value) for value in options["day"]):
            names = archive.day_objects(store, day)
            if not names:
                raise CommandError(f"no archive object of {day:%Y-%m-%d} in {where}")
            sources.extend((name, None) for name in names)
        for name in options["names"]:
            path = Path(name)
            if path.is_file():
                sources.append((name, path))
            elif store.exists(name):
                sources.append((name, None))
            else:
                raise CommandError(f"no archive object or file {name} (store: {where})")
        if options["list"]:
            for name, _ in sources:
                self.stdout.write(name)
            return

        def records() -> Iterator[dict[str, Any]]:
            for name, path in sources:
                yield from archive.read_archive(path) if path else archive.read_object(store, name)

        try:
            wanted = {uuid.UUID(j) for j in options["job"]} if options["job"] else None
            loaded = archive.archive_restore(records(), job_ids=wanted)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"history_restore: {len(loaded)} jobs loaded back from {len(sources)} archive objects"
        )
