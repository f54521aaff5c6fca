"""Alert subscriptions become the scheduler's model (scheduler.models): an alert's outbox row
(Delivery.subscription) points at the subscription it was written for, so the subscription sits
next to it, below the supervisor that writes the alerts and edits the subscriptions.

State only, as scheduler/migrations/0018 did for remediation policies: the table keeps its name
(`supervisor_alertsubscription`), its rows, constraint and indexes, and the deliveries' foreign
key keeps pointing at it; nothing in the database moves. supervisor/migrations/0005 then drops the
model from the supervisor's state. The model's content type is relabelled in place, so the
permissions that point at it (held by users and groups) and the admin's log entries follow.
"""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import scheduler.models
from sas_project.permissions import content_types_relabel

MODELS = ("alertsubscription",)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0018_remediation_policies"),
        ("supervisor", "0004_remediation_policies_moved"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="AlertSubscription",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.SlugField(max_length=100, unique=True)),
                        ("webhook_url", models.CharField(blank=True, default="", max_length=500)),
                        ("email", models.EmailField(blank=True, default="", max_length=254)),
                        ("kinds", models.JSONField(default=scheduler.models.all_alert_kinds, help_text="The alert kinds this subscription wants.")),
                        ("enabled", models.BooleanField(default=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        ("created_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        "db_table": "supervisor_alertsubscription",
                        "ordering": ["name"],
                        "constraints": [
                            models.CheckConstraint(condition=models.Q(("webhook_url", ""), ("email", ""), _negated=True), name="alertsubscription_has_target"),
                        ],
                    },
                ),
                migrations.AlterField(
                    model_name="delivery",
                    name="subscription",
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="deliveries", to="scheduler.alertsubscription"),
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel(MODELS, "supervisor", "scheduler"),
            content_types_relabel(MODELS, "scheduler", "supervisor"),
        ),
    ]
