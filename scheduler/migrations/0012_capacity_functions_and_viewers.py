"""Capacity, reruns, schedules, search and the viewer role, in the database's functions and roles.

- `sas_dispatch_ready` parks the steps of pools with limits (`waiting`) instead of dispatching
  them: the capacity pump dispatches them (scheduler.services.capacity).
- `sas_submit` takes the job's business key and priority; its previous signature stays, as a
  wrapper, for processes of the previous release until they restart.
- The `viewers` group reads every job, the console and the definitions; operators and
  administrators get that permission too.
- On PostgreSQL, a GIN index on the jobs' input serves the search by an input field.
"""

from django.db import migrations

from sas_project.permissions import grant_in_migration

# The function bodies this migration once held live in scheduler/sql/postgresql/ as their
# current text; `migrate` installs them after the migrations (sas_project.dbcode).

INPUT_INDEX = "CREATE INDEX IF NOT EXISTS job_input_gin_idx ON scheduler_job USING gin (input jsonb_path_ops)"
DROP_INPUT_INDEX = "DROP INDEX IF EXISTS job_input_gin_idx"

VIEWERS = {"viewers": ["view_all_jobs"], "operators": ["view_all_jobs"], "administrators": ["view_all_jobs"]}


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INPUT_INDEX, params=None)
    grant_in_migration(apps, VIEWERS)


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_INPUT_INDEX, params=None)
    apps.get_model("auth", "Group").objects.filter(name="viewers").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0011_capacity_reruns_schedules"),
        ("agents", "0003_capacity_reruns_schedules"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create, restore)]
