"""The history archive's format: what retention writes before it deletes, and how to load it back.

One file per settle day, `jobs-YYYY-MM-DD.jsonl.gz` (UTC), in SAS_ARCHIVE_DIR. The file is gzip
JSON Lines: one JSON object per line, one line per job, holding the job and every row that
belonged to it, each row as its table's columns (`{column: value}`, timestamps in ISO 8601 with
their offset, UUIDs as strings, JSON columns as JSON):

    {"format": "sas-job-archive/1", "job": {...}, "steps": [...], "attempts": [...],
     "events": [...], "deliveries": [...], "signals": [...]}

(`signals` came with wait steps; a record without it has none.)

Each retention batch appends one complete gzip member (gzip allows concatenated members; `zcat`
and Python's `gzip` read them as one stream), flushed and fsynced before the batch deletes
anything. A failed write is cut off again; a member cut short by a crash belongs to a batch that
never committed (its jobs are still in the hot tables and are archived again by the next run):
`read_archive` skips it and reads on from the next member.

Jobs are archived about an hour after they settle and deleted SAS_HISTORY_DAYS later
(scheduler.services.retention). A job that gets an event in between (an operator action, a late
reply) is archived again, with that event: a job may therefore appear more than once, in its
file or in the file of the day it settled again. Its last line is its latest state, the one
`archive_restore` loads (once).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import uuid
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from django.db import connection, models, transaction

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


def archive_name(settled_at: dt.datetime) -> str:
    """The file a job settled at `settled_at` is archived to (its UTC date)."""
    return f"jobs-{settled_at.astimezone(dt.UTC):%Y-%m-%d}.jsonl.gz"


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


def _private_directory(directory: Path) -> None:
    """Create `directory` (and its parents) if missing, the archive folder itself 0700."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(DIRECTORY_MODE)


def append_member(path: Path, lines: Iterable[str]) -> None:
    """Append `lines` to `path` as one gzip member, then flush and fsync it (and the directory,
    when the file is new). On any error the file is cut back to its previous length, so a failed
    batch leaves no partial member behind. A new file is created 0600 and a new folder 0700,
    whatever the umask."""
    _private_directory(path.parent)
    created = not path.exists()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    if created:
        os.fchmod(descriptor, FILE_MODE)  # the umask may have taken bits off, never added any
    with os.fdopen(descriptor, "ab") as raw:
        start = raw.tell()
        try:
            # Level 6, gzip's own default: level 9 costs several times the CPU for a few per cent.
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as member:
                for line in lines:
                    member.write(line.encode())
                    member.write(b"\n")
            raw.flush()
            os.fsync(raw.fileno())
        except BaseException:
            raw.truncate(start)
            raise
    if created:
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


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


def read_archive(path: Path) -> Iterator[dict[str, Any]]:
    """Every job record in an archive file, in the order written."""
    for member in _members(path.read_bytes()):
        for line in member.splitlines():
            if line.strip():
                record = json.loads(line)
                if record.get("format") != FORMAT:
                    raise ValueError(f"{path.name}: unknown record format {record.get('format')!r}")
                yield record


def _instance(model: type[models.Model], row: dict[str, Any]) -> models.Model:
    fields = {f.attname: f for f in model._meta.concrete_fields}
    return model(**{name: fields[name].to_python(value) for name, value in row.items() if name in fields})


def _existing(model: type[models.Model], ids: set[Any]) -> set[Any]:
    return set(model._default_manager.filter(pk__in=ids).values_list("pk", flat=True)) if ids else set()


@transaction.atomic
def archive_restore(records: Iterable[dict[str, Any]], *, job_ids: set[uuid.UUID] | None = None) -> list[str]:
    """Load archived jobs back into the tables, with their original ids; returns the ids loaded.

    Jobs already in the tables are skipped (a job archived twice loads once, as its last line);
    `job_ids` limits the load to those jobs. References to rows that no longer exist (a deleted
    user, an endpoint, the original of a rerun that was not loaded back) are set to null; a job
    whose workflow, step definition or pool is gone cannot be loaded and raises ValueError.
    """
    chosen: dict[uuid.UUID, dict[str, Any]] = {}
    for record in records:
        pk = uuid.UUID(record["job"]["id"])
        if job_ids is None or pk in job_ids:
            chosen[pk] = record  # the last line of a job archived twice is its latest state
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
