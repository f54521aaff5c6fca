"""The database's own code: functions and triggers kept as source files, installed after `migrate`.

Layout: `<app>/sql/<vendor>/<name>.sql` in the installed apps, one object per file, its current
text only (git keeps the history):

- PostgreSQL: a file defines one function, named as the file (`sas_submit.sql` holds
  `sas_submit`), and the triggers that execute it, if any. Functions are called by name with
  named parameters; a parameter added later gets a default, so the previous release's callers
  keep working during a rolling deploy and there is never a second overload.
- SQLite: a file defines one trigger, named as the file.

The installer (`install`, run by `manage.py migrate` after the migrations) compares each file's
SHA-256 with the stamp its function carries (a `COMMENT ON FUNCTION`), and when any differs
replaces the whole set in one transaction: every `sas_*` function is dropped with what depends on
it (the triggers), the files are run (plain functions first, then those with triggers) and
stamped. A function without a file (an old overload, a retired function) is thereby gone.
Replacing the whole set rather than one file keeps the triggers that depend on an unchanged
function (a `WHEN` clause calling `sas_move_allowed`) from being dropped by the cascade and not
recreated. On SQLite the triggers are dropped before the migrations (a migration that rebuilds a
table would trip on a trigger naming it) and created again after.

`drift` lists what differs between the database and the files; the system check `sas.E010`
(`manage.py check --database default`) refuses such a database, and so does `/readyz`, except
for the code of the release installed over this one (each stamp remembers the file digest it
replaced): during a rolling deploy, the previous release's processes stay ready. `migrate` itself
skips the check (`installing`): it is about to install the files.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from django.apps import apps
from django.db import transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from sas_project.database import code_dialect

#: Every function the project owns is named so; the installer owns all of them.
PREFIX = "sas_"
STAMP = "sas-source sha256:"
_TRIGGER = re.compile(r"CREATE\s+(?:CONSTRAINT\s+)?TRIGGER\s+(\w+)[\s\S]*?\bON\s+(\w+)", re.IGNORECASE)
_installing: contextvars.ContextVar[bool] = contextvars.ContextVar("sas_dbcode_installing", default=False)


@dataclass(frozen=True)
class Source:
    """One `.sql` file: the object it defines, its text and the text's digest."""

    app: str
    path: Path
    name: str
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def triggers(self) -> list[tuple[str, str]]:
        """(trigger, table) for each trigger the file creates."""
        return [(m.group(1), m.group(2)) for m in _TRIGGER.finditer(self.text)]


def sources(vendor: str) -> list[Source]:
    """The files for `vendor` in the installed apps, plain functions before those with triggers
    (a trigger needs its function, and may call the others), then by app and name."""
    found: list[Source] = []
    for config in apps.get_app_configs():
        folder = Path(config.path) / "sql" / vendor
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.sql")):
            found.append(Source(config.label, path, path.stem, path.read_text()))
    return sorted(found, key=lambda s: (bool(s.triggers), s.app, s.name))


def source(app: str, name: str, vendor: str = "postgresql") -> Source:
    """One file, for a migration that needs its function before the migrations end."""
    for found in sources(vendor):
        if (found.app, found.name) == (app, name):
            return found
    raise LookupError(f"no {app}/sql/{vendor}/{name}.sql")


@cache
def _cached_sources(vendor: str) -> tuple[Source, ...]:
    return tuple(sources(vendor))


@contextmanager
def installing() -> Iterator[None]:
    """While `migrate` runs: the database is about to get the files, so `check` leaves it be."""
    token = _installing.set(True)
    try:
        yield
    finally:
        _installing.reset(token)


def is_installing() -> bool:
    return _installing.get()


@dataclass(frozen=True)
class Json:
    """A parameter sent as jsonb (None: SQL NULL)."""

    value: Any


def function_call(name: str, **params: Any) -> tuple[str, list[Any]]:
    """`SELECT name(p_a => %s, ...)` and its parameters: a call by name, so a parameter the
    function gained later (with a default) needs no change here, and the order does not matter."""
    import json

    parts: list[str] = []
    values: list[Any] = []
    for key, value in params.items():
        if isinstance(value, Json):
            parts.append(f"p_{key} => %s::jsonb")
            values.append(None if value.value is None else json.dumps(value.value))
        else:
            parts.append(f"p_{key} => %s")
            values.append(value)
    return f"SELECT {name}({', '.join(parts)})", values


# --- PostgreSQL -------------------------------------------------------------------------------------

# The stamp names the file's digest and the digest of the definition the database made of it: a
# function replaced by hand keeps its comment, but not its definition.
FUNCTIONS_SQL = """
SELECT p.oid::regprocedure::text, p.proname, COALESCE(obj_description(p.oid, 'pg_proc'), ''),
       md5(pg_get_functiondef(p.oid))
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.proname LIKE 'sas\\_%%'
ORDER BY p.proname, p.oid
"""

TRIGGERS_SQL = """
SELECT t.tgname, c.relname, p.proname FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_proc p ON p.oid = t.tgfoid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE NOT t.tgisinternal AND t.tgparentid = 0 AND n.nspname = current_schema()
"""


def _pg_functions(cursor: Any) -> list[tuple[str, str, str]]:
    """(signature, name, stamp as it should read for the definition the database holds)."""
    cursor.execute(FUNCTIONS_SQL)
    return [(signature, name, f"{comment}|{definition}") for signature, name, comment, definition in cursor]


def _stamp(source: Source, definition: str, previous: str) -> str:
    return f"{STAMP}{source.digest} definition md5:{definition} previous sha256:{previous}"


_STAMP_RE = re.compile(r"^sas-source sha256:(\w+) definition md5:(\w+) previous sha256:(\w*)$")


def _parse(found: str) -> tuple[str, str, str] | None:
    """(file digest, definition digest as stamped, previous file digest) of a stamp, with the
    definition the database holds now checked against the stamped one: None for a function
    without a stamp or changed since it was stamped."""
    comment, _, definition = found.rpartition("|")
    match = _STAMP_RE.match(comment)
    if match is None or match.group(2) != definition:
        return None
    return match.group(1), match.group(2), match.group(3)


def _pg_drift(connection: BaseDatabaseWrapper, files: list[Source], *, lenient: bool = False) -> list[str]:
    problems: list[str] = []
    with connection.cursor() as cursor:
        functions = _pg_functions(cursor)
        cursor.execute(TRIGGERS_SQL)
        triggers = {(name, table): function for name, table, function in cursor.fetchall()}
    by_name: dict[str, list[tuple[str, str]]] = {}
    for signature, name, comment in functions:
        by_name.setdefault(name, []).append((signature, comment))
    for source in files:
        found = by_name.pop(source.name, [])
        if not found:
            problems.append(f"function {source.name} ({source.path.name}) is not installed")
        elif len(found) > 1:
            problems.append(f"function {source.name} has {len(found)} overloads: {[s for s, _ in found]}")
        elif not _stamp_matches(found[0][1], source, lenient=lenient):
            where = f"{source.app}/sql/postgresql/{source.path.name}"
            problems.append(f"function {source.name} differs from its file {where}")
        for trigger, table in source.triggers:
            if triggers.get((trigger, table)) != source.name:
                problems.append(f"trigger {trigger} on {table} ({source.path.name}) is not installed")
    for _, found in sorted(by_name.items()):
        problems.extend(
            f"function {signature} has no source file"
            for signature, comment in found
            # Lenient: a function the installed release added (no previous text) is not ours to judge.
            if not (lenient and (stamp := _parse(comment)) is not None and stamp[2] == "")
        )
    return problems


def _stamp_matches(found: str, source: Source, *, lenient: bool = False) -> bool:
    """The function is the file's text (lenient: or the text the installed release replaced)."""
    stamp = _parse(found)
    if stamp is None:
        return False
    return stamp[0] == source.digest or (lenient and stamp[2] == source.digest)


def _pg_install(connection: BaseDatabaseWrapper, files: list[Source]) -> list[str]:
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        # Two migrates at once (two hosts deploying) install one after the other.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext('sas_dbcode'))")
        if not _pg_drift(connection, files):
            return []
        # What each function was (its file's digest), kept in the new stamp: a process of that
        # release still finds the database acceptable during a rolling deploy (drift(lenient=True)).
        previous: dict[str, str] = {}
        for signature, name, found in _pg_functions(cursor):
            parsed = _parse(found)
            if parsed is not None:
                previous[name] = parsed[0]
            cursor.execute(f"DROP FUNCTION IF EXISTS {signature} CASCADE")
        for source in files:
            cursor.execute(source.text)
            cursor.execute("SELECT md5(pg_get_functiondef(%s::regproc))", [source.name])
            definition = cursor.fetchone()[0]
            stamp = _stamp(source, definition, previous.get(source.name, ""))
            # A literal, not a parameter: COMMENT takes none (the stamp is hexadecimal digests).
            cursor.execute(f"COMMENT ON FUNCTION {source.name} IS '{stamp}'")
    return [source.name for source in files]


# --- SQLite -----------------------------------------------------------------------------------------


def _sqlite_text(text: str) -> str:
    """A CREATE statement as SQLite keeps it in sqlite_master: without the comment lines before
    it and the final semicolon."""
    lines = text.strip().splitlines()
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    return "\n".join(lines).strip().removesuffix(";").strip()


def _sqlite_drift(connection: BaseDatabaseWrapper, files: list[Source]) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        installed = {name: (sql or "").strip() for name, sql in cursor.fetchall()}
    problems = []
    for source in files:
        text = installed.get(source.name)
        if text is None:
            problems.append(f"trigger {source.name} ({source.path.name}) is not installed")
        elif text != _sqlite_text(source.text):
            problems.append(f"trigger {source.name} differs from {source.app}/sql/sqlite/{source.path.name}")
    return problems


def before_migrations(connection: BaseDatabaseWrapper) -> None:
    """On SQLite, drop the project's triggers: a migration that rebuilds a table they name would
    trip on them (`install` creates them again after the migrations)."""
    if code_dialect(connection) != "sqlite":
        return
    with connection.cursor() as cursor:
        for source in sources("sqlite"):
            cursor.execute(f'DROP TRIGGER IF EXISTS "{source.name}"')


def _sqlite_install(connection: BaseDatabaseWrapper, files: list[Source]) -> list[str]:
    if not _sqlite_drift(connection, files):
        return []
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for source in files:
            cursor.execute(f'DROP TRIGGER IF EXISTS "{source.name}"')
            cursor.execute(_sqlite_text(source.text))
    return [source.name for source in files]


# --- the interface ----------------------------------------------------------------------------------


def install(connection: BaseDatabaseWrapper) -> list[str]:
    """Bring the database's functions and triggers to the files' text; returns what was
    (re)installed, nothing when the database already matches."""
    dialect = code_dialect(connection)
    files = sources(dialect)
    if dialect == "postgresql":
        return _pg_install(connection, files)
    if dialect == "sqlite":
        return _sqlite_install(connection, files)
    return []


def drift(connection: BaseDatabaseWrapper, *, lenient: bool = False) -> list[str]:
    """What differs between the database and the files (empty: they match). `lenient`: a
    database whose code is the next release's, installed over this one's, is accepted too (a
    rolling deploy: the next release's functions keep this release's calls working, by name), as
    are the functions that release added; anything else differs, a hand edit included."""
    dialect = code_dialect(connection)
    files = list(_cached_sources(dialect))
    if dialect == "postgresql":
        return _pg_drift(connection, files, lenient=lenient)
    if dialect == "sqlite":
        return _sqlite_drift(connection, files)
    return []


def check(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """System check sas.E010 (database checks: `manage.py check --database default`): the
    database's functions and triggers are the files' text."""
    from django.core.checks import Error
    from django.db import DatabaseError, connections

    if not databases or is_installing():
        return []
    errors: list[Any] = []
    for alias in databases:
        try:
            problems = drift(connections[alias])
        except DatabaseError:
            continue  # unreachable or not migrated yet: Django's own checks and migrate say so
        errors.extend(
            Error(problem, hint="Run `manage.py migrate`: it installs the database code.", id="sas.E010")
            for problem in problems
        )
    return errors
