"""The large API requests in flight per user (sas_project.inflight). UNLOGGED on PostgreSQL: a
crash only forgets requests that ended with it."""

from django.db import migrations, models


def unlogged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE api_large_request SET UNLOGGED")


class Migration(migrations.Migration):

    dependencies = [
        ("tokens", "0004_idempotent_requests"),
    ]

    operations = [
        migrations.CreateModel(
            name="LargeRequest",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("key", models.CharField(max_length=200)),
                ("expires_at", models.DateTimeField()),
            ],
            options={
                "db_table": "api_large_request",
                "indexes": [models.Index(fields=["key", "id"], name="api_large_request_key_idx")],
            },
        ),
        migrations.RunPython(unlogged, migrations.RunPython.noop, elidable=False),
    ]
