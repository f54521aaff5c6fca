"""Remediation policies left the supervisor's state for the scheduler's (scheduler/migrations/0018,
which relabels their content types too). State only: the tables and their rows stay as they are."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0018_remediation_policies"),
        ("supervisor", "0003_lease_terms"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="PolicyRevision"),
                migrations.DeleteModel(name="RemediationPolicy"),
            ],
            database_operations=[],
        ),
    ]
