"""Completion callbacks and traces through the PostgreSQL functions.

`sas_submit` stores the job's `callback_url` and `trace_parent`; `sas_record_outcome`, when it
completes a job that has a callback URL, writes the callback into the outbox (scheduler_delivery)
in the same transaction, as scheduler.transitions.job_transition does on the Python path.
"""

from django.db import migrations

# The function bodies this migration once held live in scheduler/sql/postgresql/ as their
# current text; `migrate` installs them after the migrations (sas_project.dbcode).


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0008_outbox_and_alerts")]

    operations: list[migrations.operations.base.Operation] = []
