"""The history archive's format: what retention writes before it deletes, where, and how to load
it back.

**Objects.** Each retention batch writes one new object per settle day (UTC) of its jobs, named
`jobs-YYYY-MM-DD/<written at>-<host>-<pid>-<random>.jsonl.gz` (`object_name`): names are unique
per writer and per write, so two clusters handing over the lease never write the same object
and nothing is ever appended to or overwritten. The store is a Django storage
(`archive_storage`): the folder SAS_ARCHIVE_DIR by default (`LocalArchiveStorage`: written
under a temporary name, fsynced, linked into place), or S3-compatible object storage
(SAS_ARCHIVE_STORAGE=s3, django-storages). An object is durable when `save` returns, before the
batch marks its jobs archived. Earlier versions appended every batch of a day to one file,
`jobs-YYYY-MM-DD.jsonl.gz`; `day_objects` reads it with the day's objects.

**Format.** gzip JSON Lines: one JSON object per line, one line per job, holding the job and
every row that belonged to it, each row as its table's columns (`{column: value}`, timestamps in
ISO 8601 with their offset, UUIDs as strings, JSON columns as JSON):

    {"format": "sas-job-archive/1", "job": {...}, "steps": [...], "attempts": [...],
     "events": [...], "deliveries": [...], "signals": [...]}

(`signals` came with wait steps; a record without it has none.) An object is one gzip member;
the older daily files hold several (gzip allows concatenated members; `zcat` and Python's
`gzip` read them as one stream), and a member cut short by a crash is skipped.

Jobs are archived about an hour after they settle and deleted SAS_HISTORY_DAYS later
(scheduler.services.retention). A job that gets an event in between (an operator action, a late
reply) is archived again, with that event: a job may therefore appear in more than one object
of its day, or of the day it settled again. Its latest record (the one with its newest event)
is the one `archive_restore` loads (once).
"""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import os
import re
import secrets
import socket
import uuid
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.db import connection, models, transaction

from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from scheduler.models import ArchivedJob, Attempt, Delivery, Event, Job, Signal, Step

FORMAT = "sas-job-archive/1"

#: The tables of a job's record, in the order they are loaded back.
PARTS: tuple[tuple[str, type[models.Model]], ...] = (
    ("job", Job),
    ("steps", Step),
    ("attempts", Attempt),
    ("events", Event),
    ("deliveries", Delivery),
    ("signals", Signal),
)


def settle_day(settled_at: dt.datetime) -> dt.date:
    """The day whose folder a job settled at `settled_at` is archived in (its UTC date)."""
    return settled_at.astimezone(dt.UTC).date()


def _default(value: Any) -> Any:
    # Full precision: DjangoJSONEncoder would cut timestamps to milliseconds.
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _columns(model: type[models.Model]) -> list[str]:
    return [f.attname for f in model._meta.concrete_fields]


# --- reading a batch's records out of the database ------------------------------------------------

# Set-wise, one statement for the batch: each child table is read once (a hash join on the
# batch's ids) rather than probed per job. Rows become JSON text directly (row_to_json,
# array_to_json): to_jsonb would build a binary value first, a third slower, and json_agg puts
# line breaks between elements, which a JSON Lines file cannot have.
RECORDS_SQL = """
WITH batch AS (SELECT unnest(%s::uuid[]) AS id),
steps AS (
    SELECT s.job_id, array_to_json(array_agg(s ORDER BY s.id)) AS rows
    FROM scheduler_step s JOIN batch ON batch.id = s.job_id GROUP BY s.job_id
), attempts AS (
    SELECT s.job_id, array_to_json(array_agg(a ORDER BY a.id)) AS rows
    FROM scheduler_attempt a JOIN scheduler_step s ON s.id = a.step_id JOIN batch ON batch.id = s.job_id
    GROUP BY s.job_id
), events AS (
    SELECT e.job_id, array_to_json(array_agg(e ORDER BY e.id)) AS rows
    FROM scheduler_event e JOIN batch ON batch.id = e.job_id GROUP BY e.job_id
), deliveries AS (
    SELECT d.job_id, array_to_json(array_agg(d ORDER BY d.id)) AS rows
    FROM scheduler_delivery d JOIN batch ON batch.id = d.job_id GROUP BY d.job_id
), signals AS (
    SELECT g.job_id, array_to_json(array_agg(g ORDER BY g.id)) AS rows
    FROM scheduler_signal g JOIN batch ON batch.id = g.job_id GROUP BY g.job_id
)
SELECT j.id, json_build_object(
    'format', %s::text,
    'job', row_to_json(j),
    'steps', COALESCE(steps.rows, '[]'),
    'attempts', COALESCE(attempts.rows, '[]'),
    'events', COALESCE(events.rows, '[]'),
    'deliveries', COALESCE(deliveries.rows, '[]'),
    'signals', COALESCE(signals.rows, '[]')
)::text
FROM scheduler_job j JOIN batch ON batch.id = j.id
LEFT JOIN steps ON steps.job_id = j.id
LEFT JOIN attempts ON attempts.job_id = j.id
LEFT JOIN events ON events.job_id = j.id
LEFT JOIN deliveries ON deliveries.job_id = j.id
LEFT JOIN signals ON signals.job_id = j.id
"""


def job_records(job_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Each job's archive line (without its newline). On PostgreSQL the database builds the JSON
    (one statement for the batch); elsewhere the ORM reads each table once for the batch."""
    if not job_ids:
        return {}
    if is_postgresql():
        with connection.cursor() as cursor:
            cursor.execute(RECORDS_SQL, [job_ids, FORMAT])
            return {row[0]: row[1] for row in cursor.fetchall()}
    records: dict[Any, dict[str, Any]] = {}
    for row in Job.objects.filter(pk__in=job_ids).values(*_columns(Job)):
        records[row["id"]] = {"format": FORMAT, "job": row, **{name: [] for name, _ in PARTS[1:]}}
    children: list[tuple[str, models.QuerySet[Any]]] = [
        ("steps", Step.objects.filter(job_id__in=job_ids).values(*_columns(Step), owner=models.F("job_id"))),
        (
            "attempts",
            Attempt.objects.filter(step__job_id__in=job_ids).values(
                *_columns(Attempt), owner=models.F("step__job_id")
            ),
        ),
        (
            "events",
            Event.objects.filter(job_id__in=job_ids).values(*_columns(Event), owner=models.F("job_id")),
        ),
        (
            "deliveries",
            Delivery.objects.filter(job_id__in=job_ids).values(*_columns(Delivery), owner=models.F("job_id")),
        ),
        (
            "signals",
            Signal.objects.filter(job_id__in=job_ids).values(*_columns(Signal), owner=models.F("job_id")),
        ),
    ]
    for name, rows in children:
        for row in rows.order_by("id"):
            owner = row.pop("owner")
            records[owner][name].append(row)
    return {pk: json.dumps(record, default=_default, separators=(",", ":")) for pk, record in records.items()}


# --- writing ----------------------------------------------------------------------------------------


#: The archive holds every job's input, output and history: only the service's user reads it,
#: whatever the process's umask.
DIRECTORY_MODE = 0o700
FILE_MODE = 0o600


def gzip_member(lines: Iterable[str]) -> bytes:
    """`lines` as one gzip member of JSON Lines (a newline after each)."""
    buffer = io.BytesIO()
    # Level 6, gzip's own default: level 9 costs several times the CPU for a few per cent.
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=6) as member:
        for line in lines:
            member.write(line.encode())
            member.write(b"\n")
    return buffer.getvalue()


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


class LocalArchiveStorage(FileSystemStorage):
    """The default store: a folder on this host, SAS_ARCHIVE_DIR.

    An object is written under a temporary name, fsynced, then linked to its own name (a link
    refuses a name that exists: nothing is ever overwritten) and its folder fsynced: an object
    is whole or absent, and durable once `save` returns. Objects are 0600 in 0700 folders,
    whatever the umask. Names starting with a dot (the temporary ones) are not listed.
    """

    def __init__(self, location: str | Path | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("file_permissions_mode", FILE_MODE)
        kwargs.setdefault("directory_permissions_mode", DIRECTORY_MODE)
        super().__init__(location=location, **kwargs)

    def _directories(self, directory: Path) -> None:
        """Create `directory` and the missing folders above it, each 0700 and fsynced into its
        parent, so that a durable object is never in a folder that a crash forgets."""
        missing: list[Path] = []
        while not directory.is_dir():
            missing.append(directory)
            directory = directory.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # another writer made it meanwhile
                continue
            folder.chmod(DIRECTORY_MODE)
            _fsync_directory(folder.parent)

    def _save(self, name: str, content: Any) -> str:
        target = Path(self.path(name))
        self._directories(target.parent)
        partial = target.with_name(f".{target.name}.{secrets.token_hex(4)}.partial")
        descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        try:
            os.fchmod(descriptor, FILE_MODE)  # the umask may have taken bits off, never added any
            with os.fdopen(descriptor, "wb") as out:
                for chunk in content.chunks():
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            os.link(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        _fsync_directory(target.parent)
        return name

    def listdir(self, path: str) -> tuple[list[str], list[str]]:
        directories, files = super().listdir(path)
        return directories, [f for f in files if not f.startswith(".")]


def archive_storage() -> Storage:
    """Where the archive is written and read: the `archive` entry of Django's STORAGES when one
    is configured (SAS_ARCHIVE_STORAGE=s3 sets it), else SAS_ARCHIVE_DIR on this host."""
    if "archive" in settings.STORAGES:
        return storages["archive"]
    return LocalArchiveStorage(location=sas_settings.archive_dir)


def storage_errors() -> tuple[type[BaseException], ...]:
    """What a store raises when it cannot write: the disk's OSError, and the S3 client's errors
    (a refused request, an unreachable endpoint, a timeout)."""
    from botocore.exceptions import BotoCoreError, ClientError

    return (OSError, BotoCoreError, ClientError)


def describe_storage(store: Storage) -> str:
    """The store as an operator names it: a folder, or `s3://bucket/prefix`."""
    bucket = getattr(store, "bucket_name", None)
    if bucket:
        return f"s3://{bucket}/{getattr(store, 'location', '')}".rstrip("/")
    location = getattr(store, "location", None)
    return str(location) if location else type(store).__name__


def _writer() -> str:
    """This process, as it appears in the names of the objects it writes: host and pid."""
    host = re.sub(r"[^A-Za-z0-9.-]+", "-", socket.gethostname())[:40].strip("-.") or "host"
    return f"{host}-{os.getpid()}"


def day_folder(day: dt.date) -> str:
    return f"jobs-{day:%Y-%m-%d}"


def object_name(settled_day: dt.date, *, now: dt.datetime | None = None) -> str:
    """A new object's name: the settle day's folder, then when and by whom it was written and a
    random suffix, so that no two writes (two clusters handing over the lease, two batches of
    one process) ever name the same object."""
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    return f"{day_folder(settled_day)}/{now:%Y%m%dT%H%M%S.%fZ}-{_writer()}-{secrets.token_hex(4)}.jsonl.gz"


def write_object(store: Storage, settled_day: dt.date, lines: Iterable[str]) -> str:
    """Write `lines` as a new object of `settled_day`; returns its name once it is durable."""
    return store.save(object_name(settled_day), ContentFile(gzip_member(lines)))


def day_objects(store: Storage, day: dt.date) -> list[str]:
    """Every object of a settle day, oldest first: the objects in its folder and a single-file
    archive `jobs-YYYY-MM-DD.jsonl.gz` that earlier versions appended to."""
    folder = day_folder(day)
    try:
        _, files = store.listdir(folder)
    except FileNotFoundError:
        files = []
    names = sorted(f"{folder}/{name}" for name in files if name.endswith(".jsonl.gz"))
    if store.exists(f"{folder}.jsonl.gz"):
        names.insert(0, f"{folder}.jsonl.gz")
    return names


# --- reading and loading back -------------------------------------------------------------------------

GZIP_MAGIC = b"\x1f\x8b\x08"


def _members(data: bytes) -> Iterator[bytes]:
    """The decompressed gzip members of `data`; a damaged or truncated member is skipped and
    reading resumes at the next member header."""
    position = 0
    while position < len(data):
        start = data.find(GZIP_MAGIC, position)
        if start < 0:
            return
        decoder = zlib.decompressobj(wbits=31)
        try:
            out = decoder.decompress(data[start:])
        except zlib.error:
            position = start + 1
            continue
        if not decoder.eof:  # cut short: a batch that never committed
            position = start + 1
            continue
        yield out
        position = len(data) - len(decoder.unused_data)


def read_records(data: bytes, name: str) -> Iterator[dict[str, Any]]:
    """Every job record in an archive object's bytes, in the order written."""
    for member in _members(data):
        for line in member.splitlines():
            if line.strip():
                record = json.loads(line)
                if record.get("format") != FORMAT:
                    raise ValueError(f"{name}: unknown record format {record.get('format')!r}")
                yield record


def read_archive(path: Path) -> Iterator[dict[str, Any]]:
    """Every job record in an archive file on this host, in the order written."""
    return read_records(path.read_bytes(), path.name)


def read_object(store: Storage, name: str) -> Iterator[dict[str, Any]]:
    """Every job record in an object of the store, in the order written."""
    with store.open(name, "rb") as stored:
        data = stored.read()
    return read_records(data, name)


def _recency(record: dict[str, Any]) -> int:
    """How late a record of a job is: its newest event's id. A job archived again was archived
    because an event came, so its later record holds more events; ids come from one sequence, so
    this orders two records written by different hosts whatever their clocks (ties, a record
    read twice, go to the one read last)."""
    return max((event["id"] for event in record.get("events", ())), default=-1)


def _instance(model: type[models.Model], row: dict[str, Any]) -> models.Model:
    fields = {f.attname: f for f in model._meta.concrete_fields}
    return model(**{name: fields[name].to_python(value) for name, value in row.items() if name in fields})


def _existing(model: type[models.Model], ids: set[Any]) -> set[Any]:
    return set(model._default_manager.filter(pk__in=ids).values_list("pk", flat=True)) if ids else set()


@transaction.atomic
def archive_restore(records: Iterable[dict[str, Any]], *, job_ids: set[uuid.UUID] | None = None) -> list[str]:
    """Load archived jobs back into the tables, with their original ids; returns the ids loaded.

    Jobs already in the tables are skipped (a job archived twice loads once, as its latest record);
    `job_ids` limits the load to those jobs. References to rows that no longer exist (a deleted
    user, an endpoint, the original of a rerun that was not loaded back) are set to null; a job
    whose workflow, step definition or pool is gone cannot be loaded and raises ValueError.
    """
    chosen: dict[uuid.UUID, dict[str, Any]] = {}
    for record in records:
        pk = uuid.UUID(record["job"]["id"])
        if job_ids is None or pk in job_ids:
            held = chosen.get(pk)
            if held is None or _recency(record) >= _recency(held):
                chosen[pk] = record
    for pk in _existing(Job, set(chosen)):
        del chosen[pk]
    if not chosen:
        return []
    objects: dict[str, list[models.Model]] = {name: [] for name, _ in PARTS}
    for record in chosen.values():
        objects["job"].append(_instance(Job, record["job"]))
        for name, model in PARTS[1:]:
            objects[name].extend(_instance(model, row) for row in record.get(name, []))
    restored_steps = {s.pk for s in objects["steps"]}
    _null_missing(objects, restored_jobs=set(chosen), restored_steps=restored_steps)
    for name, model in PARTS:
        model._default_manager.bulk_create(objects[name], batch_size=500)
    ArchivedJob.objects.filter(job_id__in=list(chosen)).delete()
    return [str(pk) for pk in chosen]


def _null_missing(
    objects: dict[str, list[models.Model]], *, restored_jobs: set[uuid.UUID], restored_steps: set[int]
) -> None:
    """Point references at rows that are gone to null, or refuse the load when they may not be."""
    for name, model in PARTS:
        for field in model._meta.concrete_fields:
            if not isinstance(field, models.ForeignKey):
                continue
            target = field.related_model
            assert isinstance(target, type)
            values = {getattr(o, field.attname) for o in objects[name]} - {None}
            present = _existing(target, values)
            if target is Job:
                present |= restored_jobs
            elif target is Step:
                present |= restored_steps
            missing = values - present
            if not missing:
                continue
            if not field.null:
                raise ValueError(
                    f"cannot load back: {model.__name__}.{field.name} names {target.__name__} rows that "
                    f"no longer exist ({sorted(map(str, missing))[:5]})"
                )
            for o in objects[name]:
                if getattr(o, field.attname) in missing:
                    setattr(o, field.attname, None)
