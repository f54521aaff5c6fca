"""A workflow version says whether the SQL fast path runs its jobs (`plain`), and each step
definition whether that path may record its success (`plain_outcome`): the functions test the
flag instead of listing the language's features. Existing versions get them from the conditions
the functions tested until now."""

from django.db import migrations, models
from django.db.models import Q


def mark_plain(apps, schema_editor):  # type: ignore[no-untyped-def]
    """scheduler.definitions.outcome_plain and step_plain at the time, set-wise."""
    definition = apps.get_model("scheduler", "StepDefinition")
    workflow = apps.get_model("scheduler", "Workflow")
    definition.objects.filter(output_map="").exclude(join_mode="any").update(plain_outcome=True)
    not_plain = definition.objects.filter(
        ~Q(kind="call") | ~Q(when="") | ~Q(for_each="") | ~Q(output_map="")
    ).values("workflow_id")
    workflow.objects.exclude(pk__in=not_plain).update(plain=True)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0032_receivers"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="plain",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.AddField(
            model_name="stepdefinition",
            name="plain_outcome",
            field=models.BooleanField(db_default=False, default=False, editable=False),
        ),
        migrations.RunPython(mark_plain, migrations.RunPython.noop, elidable=True),
    ]
