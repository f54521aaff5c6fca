"""The API's request rates, counted in the database so that every web process counts the same
requests (sas_project.throttling). On PostgreSQL the table is UNLOGGED: no WAL for a write that
every API request makes, and a crash only empties it (every client's bucket full again)."""

from django.db import migrations, models


def unlogged(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("ALTER TABLE api_rate_bucket SET UNLOGGED")


class Migration(migrations.Migration):

    dependencies = [
        ('tokens', '0002_carry_over_drf_tokens'),
    ]

    operations = [
        migrations.CreateModel(
            name='RateBucket',
            fields=[
                ('key', models.CharField(max_length=200, primary_key=True, serialize=False)),
                ('tat', models.FloatField()),
                ('seen_at', models.FloatField()),
                ('refused', models.BooleanField(default=False)),
            ],
            options={
                'verbose_name': 'API rate bucket',
                'db_table': 'api_rate_bucket',
            },
        ),
        migrations.RunPython(unlogged, migrations.RunPython.noop, elidable=False),
    ]
