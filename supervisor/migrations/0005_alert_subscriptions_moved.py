"""Alert subscriptions left the supervisor's state for the scheduler's (scheduler/migrations/0019,
which relabels their content type too). State only: the table and its rows stay as they are."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0019_alert_subscriptions"),
        ("supervisor", "0004_remediation_policies_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AlertSubscription"),
            ],
            database_operations=[],
        ),
    ]
