"""The three role groups and their permissions (see scheduler/permissions.py)."""

from django.db import migrations

from sas_project.permissions import grant_in_migration

ROLE_GROUPS = {
    "submitters": ["submit_job"],
    "operators": ["submit_job", "operate_job"],
    "administrators": ["submit_job", "operate_job", "manage_definitions"],
}


def create_groups(apps, schema_editor):
    grant_in_migration(apps, ROLE_GROUPS)


def remove_groups(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name__in=ROLE_GROUPS).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0002_job_permissions"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, remove_groups)]
