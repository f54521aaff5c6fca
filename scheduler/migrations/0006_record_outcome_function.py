"""The outcome's hot path on PostgreSQL: one function records the common outcomes in one round trip.

`sas_record_outcome` takes the job's row lock, checks that the attempt is the live call of an
action step of a running, unpaused job, and then, in the same transaction: finishes the attempt,
moves the step (dispatched -> succeeded, attempt_failed or unknown), and on success dispatches every
pending step whose dependencies have all succeeded (the step's intent, its attempt, its queue row
as a compact task, an announcement when the queue was otherwise empty) or completes the job, with
the same events the Python services write. Anything else (a late or superseded attempt, a
compensation, a reconcile, a job that is paused or not running) answers 'fallback' before writing
anything, and the caller takes the general path (scheduler.services.outcomes). The moves it makes
were then listed in Python and checked against the state machines' tables (today the database
refuses any move the tables do not allow), and the tests run the same scenarios through both paths
and compare every row.

SQLite has no such function: the general path serves it.
"""

from django.db import migrations

# The function bodies this migration once held live in scheduler/sql/postgresql/ as their
# current text; `migrate` installs them after the migrations (sas_project.dbcode).


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0005_event_kind_vocabulary"),
        ("agents", "0001_initial"),
        ("supervisor", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations: list[migrations.operations.base.Operation] = []
