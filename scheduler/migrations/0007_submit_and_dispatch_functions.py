"""Submission on PostgreSQL in one round trip, and one dispatch routine for it and the outcome.

`sas_dispatch_ready(job, now, ...)` writes, for every pending step of a job whose dependencies
have all succeeded, what scheduler.services.dispatch writes: the intent, the attempt, the task
(a compact queue row, announced when the queue was otherwise empty) and the event. The caller
holds the job's row lock (or has just created the job).

`sas_submit` creates a job of a workflow's latest version with its steps and its
`job_submitted` event, and dispatches its first steps; it answers NULL for an unknown workflow.
The rules around it (input checks, idempotency keys and their replays) stay in
scheduler.services.submission, which calls it.

`sas_record_outcome` is the same as in 0006, its DAG advance now through `sas_dispatch_ready`.
The tests run the same submissions and outcomes through these functions and through the Python
services and compare every row they leave.
"""

from django.db import migrations

# The function bodies this migration once held live in scheduler/sql/postgresql/ as their
# current text; `migrate` installs them after the migrations (sas_project.dbcode).


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0006_record_outcome_function")]

    operations: list[migrations.operations.base.Operation] = []
