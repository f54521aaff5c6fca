"""Signing secrets: one per alert subscription and one per submitter (Standard Webhooks).

The subscriptions that exist get a secret each: the field's default is computed once for
AddField, so every existing row is given its own afterwards.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import scheduler.models


def secret_per_subscription(apps, schema_editor):
    AlertSubscription = apps.get_model("scheduler", "AlertSubscription")
    for subscription in AlertSubscription.objects.all():
        subscription.signing_secret = scheduler.models.signing_secret_new()
        subscription.save(update_fields=["signing_secret"])


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0027_reply_dead_lettered_event"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="alertsubscription",
            name="previous_signing_secret",
            field=models.CharField(blank=True, default="", max_length=100),
        ),
        migrations.AddField(
            model_name="alertsubscription",
            name="previous_signing_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="alertsubscription",
            name="signing_rotated_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="alertsubscription",
            name="signing_secret",
            field=models.CharField(default=scheduler.models.signing_secret_new, max_length=100),
        ),
        migrations.RunPython(secret_per_subscription, migrations.RunPython.noop, elidable=True),
        migrations.CreateModel(
            name="CallbackSecret",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "signing_secret",
                    models.CharField(default=scheduler.models.signing_secret_new, max_length=100),
                ),
                ("previous_signing_secret", models.CharField(blank=True, default="", max_length=100)),
                ("previous_signing_until", models.DateTimeField(blank=True, null=True)),
                ("signing_rotated_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="callback_secret",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "abstract": False,
            },
        ),
    ]
