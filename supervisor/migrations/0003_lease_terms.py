"""Lease terms: a trigger on the lease row records each finished term in the statement that hands
the lease over (supervisor.models.LeaseTerm)."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

# The trigger that records the previous holder's term (and its function) lives in
# supervisor/sql/; `migrate` installs it after the migrations (sas_project.dbcode).
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS supervisor_lease_term ON supervisor_supervisorlease",
    "DROP FUNCTION IF EXISTS sas_lease_term()",
]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS supervisor_lease_term"]


def _run(sql: dict[str, list[str]]) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            for statement in sql.get(schema_editor.connection.vendor, []):
                cursor.execute(statement)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0002_outbox_and_alerts"),
    ]

    operations = [
        migrations.CreateModel(
            name="LeaseTerm",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("lease", models.CharField(max_length=50)),
                ("token", models.BigIntegerField()),
                ("holder", models.CharField(max_length=200)),
                ("acquired_at", models.DateTimeField(blank=True, null=True)),
                ("expired_at", models.DateTimeField(blank=True, null=True)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("ended_by", models.CharField(max_length=200)),
            ],
            options={
                "ordering": ["id"],
            },
        ),
        migrations.RunPython(
            migrations.RunPython.noop,
            _run({"postgresql": POSTGRES_DOWN, "sqlite": SQLITE_DOWN}),
        ),
    ]
