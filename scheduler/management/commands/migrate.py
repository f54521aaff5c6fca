"""Django's `migrate`, then the database's own code (sas_project.dbcode) brought to the files."""

from __future__ import annotations

from typing import Any

from django.core.management.commands import migrate
from django.db import connections

from sas_project import dbcode


class Command(migrate.Command):
    help = migrate.Command.help + " Then installs the functions and triggers of <app>/sql/."

    def check(self, *args: Any, **kwargs: Any) -> None:
        # The database-code check would refuse the very difference this command is about to fix.
        with dbcode.installing():
            super().check(*args, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        inspecting = options.get("plan") or options.get("check_unapplied")
        if not inspecting:
            dbcode.before_migrations(connection)
        super().handle(*args, **options)
        if inspecting:
            return
        installed = dbcode.install(connection)
        if installed and options["verbosity"] >= 1:
            self.stdout.write(f"Installed the database code: {', '.join(installed)}")
