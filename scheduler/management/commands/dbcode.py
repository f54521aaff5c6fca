"""The database's own code: `--generate` writes the files generated from the Python tables
(scheduler.sqlgen), `--check` lists what differs between the database and the files, and with
neither it installs the files (as `migrate` does after the migrations)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections

from sas_project import dbcode
from scheduler import sqlgen


class Command(BaseCommand):
    help = __doc__ or ""
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--generate", action="store_true", help="Write the generated .sql files.")
        parser.add_argument("--check", action="store_true", help="Fail when the database differs.")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["generate"]:
            for path in sqlgen.write():
                self.stdout.write(f"wrote {path}")
            return
        connection = connections[options["database"]]
        if options["check"]:
            problems = dbcode.drift(connection)
            if problems:
                raise CommandError("\n".join(problems))
            self.stdout.write("The database code matches the files.")
            return
        installed = dbcode.install(connection)
        self.stdout.write(f"Installed: {', '.join(installed)}" if installed else "Already installed.")
