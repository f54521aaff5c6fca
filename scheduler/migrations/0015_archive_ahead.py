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

On SQLite the trigger names scheduler_job, which SQLite then checks whenever a table is rebuilt
and renamed: a later migration that alters scheduler_job or scheduler_event there must drop the
trigger first and create it again after (the operations here come before it for that reason).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


PG_TRIGGER = """
CREATE OR REPLACE FUNCTION sas_event_job_guard() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    archived timestamptz;
BEGIN
    -- What the foreign key did: the job exists, and stays until this transaction ends.
    SELECT archived_at INTO archived FROM scheduler_job WHERE id = NEW.job_id FOR KEY SHARE;
    IF NOT FOUND THEN
        -- As the foreign key's check: an event deleted again before the commit is no violation.
        IF EXISTS (SELECT 1 FROM scheduler_event WHERE id = NEW.id AND created_at = NEW.created_at) THEN
            RAISE foreign_key_violation
                USING MESSAGE = 'event names job ' || NEW.job_id || ', which does not exist';
        END IF;
        RETURN NULL;
    END IF;
    -- A job archived before this event: its archive line lacks it, so it is archived again.
    IF archived IS NOT NULL THEN
        UPDATE scheduler_job SET archived_at = NULL WHERE id = NEW.job_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER event_job_guard AFTER INSERT ON scheduler_event
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION sas_event_job_guard();
"""

PG_TRIGGER_DROP = """
DROP TRIGGER IF EXISTS event_job_guard ON scheduler_event;
DROP FUNCTION IF EXISTS sas_event_job_guard();
"""

# SQLite: one writer at a time, so no lock is needed, and triggers run at once.
SQLITE_TRIGGER = """
CREATE TRIGGER event_job_guard AFTER INSERT ON scheduler_event
BEGIN
    SELECT RAISE(ABORT, 'event names a job that does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM scheduler_job WHERE id = NEW.job_id);
    UPDATE scheduler_job SET archived_at = NULL WHERE id = NEW.job_id AND archived_at IS NOT NULL;
END;
"""


def create_trigger(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        schema_editor.execute(PG_TRIGGER)
    elif connection.vendor == "sqlite":
        schema_editor.execute(SQLITE_TRIGGER)


def drop_trigger(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor == "postgresql":
        schema_editor.execute(PG_TRIGGER_DROP)
    elif connection.vendor == "sqlite":
        schema_editor.execute("DROP TRIGGER IF EXISTS event_job_guard")


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
        migrations.AlterField(
            model_name="event",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="scheduler.job",
            ),
        ),
        migrations.AlterField(
            model_name="event",
            name="step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="scheduler.step",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                condition=models.Q(("archived_at__isnull", True), ("finished_at__isnull", False)),
                fields=["finished_at"],
                name="job_unarchived_idx",
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="rerun_of",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reruns",
                to="scheduler.job",
            ),
        ),
        migrations.AlterField(
            model_name="schedule",
            name="last_job",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduler.job",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="compensates",
            field=models.OneToOneField(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="compensation",
                to="scheduler.step",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="reused_from",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="scheduler.step",
            ),
        ),
        migrations.RunPython(create_trigger, drop_trigger),
    ]
