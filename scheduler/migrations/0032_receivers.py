"""Each outbox message names its receiver (`host:port`), which the sender takes turns between and
keeps a circuit breaker for; the messages not yet delivered get theirs from their URL. The alerts'
lane of the claim has its own index."""

from urllib.parse import urlsplit

from django.db import migrations, models

DEFAULT_PORTS = {"http": 80, "https": 443}


def receiver_of(url):  # type: ignore[no-untyped-def]
    """scheduler.outbox.receiver_of at the time."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return ""
    host = (parts.hostname or "").rstrip(".")
    if not host or port is None:
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def name_receivers(apps, schema_editor):  # type: ignore[no-untyped-def]
    delivery = apps.get_model("scheduler", "Delivery")
    undelivered = delivery.objects.exclude(status="delivered").exclude(kind="email").only("pk", "target")
    for message in undelivered.iterator(chunk_size=1000):
        delivery.objects.filter(pk=message.pk).update(receiver=receiver_of(message.target))


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0031_quarantine_and_schedule_failures"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="receiver",
            field=models.CharField(blank=True, db_default="", default="", max_length=300),
        ),
        migrations.AddIndex(
            model_name="delivery",
            index=models.Index(
                condition=models.Q(("status", "pending"), models.Q(("kind", "callback"), _negated=True)),
                fields=["next_try_at"],
                name="delivery_alert_due_idx",
            ),
        ),
        migrations.RunPython(name_receivers, migrations.RunPython.noop, elidable=True),
    ]
