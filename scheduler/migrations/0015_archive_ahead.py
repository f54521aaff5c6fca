"""History archived ahead of deletion (scheduler.services.retention).

- `Job.archived_at`, and the archiver's backlog index `job_unarchived_idx`: settled jobs are
  written to the archive about an hour after they settle; retention later only deletes them.
- The event table's foreign-key constraints go (`db_constraint=False`): on the partitioned log
  they made every job and step deletion probe every month. The constraint trigger below keeps
  their guarantee for the job, at the same moment (commit) and with the same lock (key share on
  the job row), and also clears `archived_at` of a job that gets an event after it was archived,
  so that it is archived again, with that event, before it may be deleted.
- Four pointers stop being constraints too (`Job.rerun_of`, `Step.reused_from`,
  `Step.compensates`, `Schedule.last_job`): retention follows their rules instead (see the note
  above Job in scheduler/models.py). Their indexes stay.
- `PruneRun.archived`: the jobs a run wrote to the archive.

On SQLite the trigger names scheduler_job, which SQLite checks whenever a table is rebuilt and
renamed: `migrate` drops the project's SQLite triggers before the migrations and creates them
after (sas_project.dbcode).
"""

from django.db.models.deletion import CASCADE, SET_NULL
from django.conf import settings
from django.db import migrations, models


# The trigger and its function live in scheduler/sql/ (postgresql/sas_event_job_guard.sql,
# sqlite/event_job_guard.sql); `migrate` installs them after the migrations (sas_project.dbcode).


def drop_trigger(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        schema_editor.execute("DROP TRIGGER IF EXISTS event_job_guard ON scheduler_event")
        schema_editor.execute("DROP FUNCTION IF EXISTS sas_event_job_guard()")
    elif connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS event_job_guard")


def _loose(model_name, name, to, on_delete, related_name, *, optional=False, db_index=True, one_to_one=False):
    """A pointer that stops being a database constraint (db_constraint=False), as generated."""
    field_class = models.OneToOneField if one_to_one else models.ForeignKey
    extra = {"blank": True, "null": True} if optional else {}
    if not db_index:
        extra["db_index"] = False
    return migrations.AlterField(
        model_name=model_name,
        name=name,
        field=field_class(
            db_constraint=False, on_delete=on_delete, related_name=related_name, to=to, **extra
        ),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0014_event_partitions"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="archived_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="prunerun",
            name="archived",
            field=models.PositiveIntegerField(db_default=0, default=0, verbose_name="jobs archived"),
        ),
        migrations.AlterField(
            model_name="prunerun",
            name="jobs",
            field=models.PositiveIntegerField(default=0, verbose_name="jobs deleted"),
        ),
        _loose("event", "job", "scheduler.job", CASCADE, "events", db_index=False),
        _loose("event", "step", "scheduler.step", CASCADE, "events", optional=True),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("archived_at__isnull", True), ("finished_at__isnull", False)),
                fields=["finished_at"],
                name="job_unarchived_idx",
            ),
        ),
        _loose("job", "rerun_of", "scheduler.job", SET_NULL, "reruns", optional=True, db_index=False),
        _loose("schedule", "last_job", "scheduler.job", SET_NULL, "+", optional=True),
        _loose("step", "compensates", "scheduler.step", CASCADE, "compensation", optional=True, one_to_one=True),
        _loose("step", "reused_from", "scheduler.step", SET_NULL, "+", optional=True, db_index=False),
        migrations.RunPython(migrations.RunPython.noop, drop_trigger),
    ]
