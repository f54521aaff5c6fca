from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0010_receivers"),
    ]

    operations = [
        migrations.AddField(
            model_name="clusterheartbeat",
            name="busy",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
