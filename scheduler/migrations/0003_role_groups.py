"""The three role groups and their permissions (see scheduler/permissions.py)."""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLE_GROUPS = {
    "submitters": ["submit_job"],
    "operators": ["submit_job", "operate_job"],
    "administrators": ["submit_job", "operate_job", "manage_definitions"],
}


def create_groups(apps, schema_editor):
    # Permissions are normally created after all migrations ran; this one needs them now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in ROLE_GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="scheduler", codename__in=codenames)
        )


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0002_job_permissions"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
