"""The database's code becomes source files (scheduler/sql/, supervisor/sql/), installed by `migrate`
after the migrations (sas_project.dbcode). The two wrappers that kept earlier `sas_submit`
signatures alive go: `sas_submit` is called by name, and its later parameters have defaults.
(The installer drops any `sas_*` function without a file anyway; this says it where it happens.)"""

from django.db import migrations

DROP_OVERLOADS = """
DROP FUNCTION IF EXISTS sas_submit(text, jsonb, integer, text, text, text, text, text, integer, boolean);
DROP FUNCTION IF EXISTS sas_submit(text, jsonb, integer, text, text, text, text, text, integer, boolean,
                                   text, text);
"""


def forward(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_OVERLOADS, params=None)


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0015_archive_ahead")]

    operations = [migrations.RunPython(forward, migrations.RunPython.noop)]
