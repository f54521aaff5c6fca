"""Tokens made by DRF's authtoken app before this one replaced it keep working: each is copied
(as its digest) with the standard lifetime from now. The old table, if any, is left alone."""

import datetime as dt
import hashlib

from django.conf import settings
from django.db import migrations
from django.utils import timezone


def carry_over(apps, schema_editor):
    connection = schema_editor.connection
    if "authtoken_token" not in connection.introspection.table_names():
        return
    ApiToken = apps.get_model("tokens", "ApiToken")
    days = float(getattr(settings, "SAS_TOKEN_LIFETIME_DAYS", 90))
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT key, user_id FROM authtoken_token")
        rows = cursor.fetchall()
    for key, user_id in rows:
        digest = hashlib.sha256(key.encode()).hexdigest()
        if ApiToken.objects.filter(digest=digest).exists():
            continue
        ApiToken.objects.create(
            user_id=user_id,
            name="carried over",
            digest=digest,
            prefix=key[:8],
            created_at=now,
            expires_at=now + dt.timedelta(days=days) if days else None,
        )


class Migration(migrations.Migration):
    dependencies = [("tokens", "0001_initial")]

    operations = [migrations.RunPython(carry_over, migrations.RunPython.noop)]
