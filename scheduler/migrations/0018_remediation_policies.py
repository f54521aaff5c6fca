"""Remediation policies become the scheduler's models (scheduler.models): the dispatch reads them,
so their data sits next to the step definitions that name them, below the supervisor that decides
with them.

State only: the tables keep their names (`supervisor_remediationpolicy`,
`supervisor_policyrevision`, which the database code joins), their rows, constraints and
indexes; nothing in the database moves. supervisor/migrations/0004 then drops the models from the
supervisor's state. The content types of the two models are relabelled in place, so the
permissions that point at them (held by users and groups) and the admin's log entries follow.
"""

from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

import scheduler.models
from sas_project.permissions import content_types_relabel

MODELS = ("remediationpolicy", "policyrevision")


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0017_event_reactions"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RemediationPolicy",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.SlugField(max_length=100, unique=True)),
                        ("version", models.PositiveIntegerField(default=1)),
                        ("timeout_seconds", models.FloatField(default=10.0, help_text="Deadline of one attempt.")),
                        ("max_attempts", models.PositiveIntegerField(default=3, help_text="Calls in total, first included.")),
                        ("backoff_initial_seconds", models.FloatField(default=1.0)),
                        ("backoff_multiplier", models.FloatField(default=2.0)),
                        ("backoff_max_seconds", models.FloatField(default=60.0)),
                        ("backoff_jitter", models.FloatField(default=0.5, help_text="Fraction of the delay drawn at random: 0 = none, 1 = full jitter.")),
                        ("retry_on", models.JSONField(default=scheduler.models.default_retry_on, help_text="Outcomes that are retried.")),
                        ("reassign_after_attempts", models.PositiveIntegerField(blank=True, help_text="After this many failed calls move to the alternate pool.", null=True)),
                        ("on_exhausted", models.CharField(choices=[("compensate", "Compensate the job"), ("fail", "Fail the job"), ("hold", "Hold for an operator")], default="compensate", max_length=16)),
                        ("reconcile_before_retry", models.BooleanField(default=False, help_text="For an unknown outcome, ask the remote (status path) before calling again.")),
                        ("step_budget_seconds", models.FloatField(blank=True, help_text="Total time across all attempts of a step.", null=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                    ],
                    options={
                        "verbose_name_plural": "remediation policies",
                        "db_table": "supervisor_remediationpolicy",
                        "ordering": ["name"],
                        "constraints": [
                            models.CheckConstraint(condition=models.Q(("on_exhausted__in", ["compensate", "fail", "hold"])), name="policy_on_exhausted_valid"),
                            models.CheckConstraint(condition=models.Q(("timeout_seconds__gt", 0)), name="policy_timeout_positive"),
                            models.CheckConstraint(condition=models.Q(("max_attempts__gte", 1)), name="policy_max_attempts_min"),
                            models.CheckConstraint(condition=models.Q(("backoff_jitter__gte", 0), ("backoff_jitter__lte", 1)), name="policy_jitter_fraction"),
                        ],
                    },
                ),
                migrations.AlterField(
                    model_name="stepdefinition",
                    name="policy",
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="step_definitions", to="scheduler.remediationpolicy"),
                ),
                migrations.CreateModel(
                    name="PolicyRevision",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("version", models.PositiveIntegerField()),
                        ("settings", models.JSONField(help_text="All fields of the policy at this version.")),
                        ("changes", models.JSONField(default=dict, help_text="{field: [old, new]} against the previous version.")),
                        ("changed_at", models.DateTimeField(auto_now_add=True)),
                        ("changed_by", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                        ("policy", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="revisions", to="scheduler.remediationpolicy")),
                    ],
                    options={
                        "db_table": "supervisor_policyrevision",
                        "ordering": ["policy_id", "version"],
                        "constraints": [models.UniqueConstraint(fields=("policy", "version"), name="policyrevision_unique_version")],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(
            content_types_relabel(MODELS, "supervisor", "scheduler"),
            content_types_relabel(MODELS, "scheduler", "supervisor"),
        ),
    ]
