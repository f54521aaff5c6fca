"""Django's `migrate`, then the database's own code (sas_project.dbcode) brought to the files.

Several processes may run it at once (each pod's init container at a release, two hosts
deploying): on PostgreSQL they take turns under one advisory lock, so the first applies the
migrations and installs the code, and the next find nothing to do. The code is installed only
where it differs from the files: a start with nothing to migrate changes nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.commands import migrate
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.migrations.executor import MigrationExecutor

from sas_project import database, dbcode

#: The advisory lock's key (a constant of this command, as dbcode's own is of the install).
LOCK = "sas_migrate"


@contextmanager
def _one_at_a_time(connection: BaseDatabaseWrapper) -> Iterator[None]:
    if not database.is_postgresql(connection):
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(hashtext(%s))", [LOCK])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(hashtext(%s))", [LOCK])


def _unapplied(connection: BaseDatabaseWrapper) -> bool:
    executor = MigrationExecutor(connection)
    return bool(executor.migration_plan(executor.loader.graph.leaf_nodes()))


class Command(migrate.Command):
    help = migrate.Command.help + " Then installs the functions and triggers of <app>/sql/."

    def check(self, *args: Any, **kwargs: Any) -> None:
        # The database-code check would refuse the very difference this command is about to fix.
        with dbcode.installing():
            super().check(*args, **kwargs)

    def handle(self, *args: Any, **options: Any) -> None:
        connection = connections[options["database"]]
        if options.get("plan") or options.get("check_unapplied"):
            super().handle(*args, **options)
            return
        with _one_at_a_time(connection):
            # Only when a migration will run: the triggers it might trip on are dropped, and
            # installed again below; otherwise they stay as they are.
            if options.get("app_label") or _unapplied(connection):
                dbcode.before_migrations(connection)
            super().handle(*args, **options)
            installed = dbcode.install(connection)
        if installed and options["verbosity"] >= 1:
            self.stdout.write(f"Installed the database code: {', '.join(installed)}")
