"""Who may do what: four roles, held as Django permissions and granted through groups.

- viewers (`scheduler.view_all_jobs`): read every job, the console and the definitions; no action;
- submitters (`scheduler.submit_job`): submit jobs and read their own;
- operators (`scheduler.operate_job`): read every job and act on jobs and steps (retry, resolve,
  compensate, cancel, pause, resume);
- administrators (`scheduler.manage_definitions`): also create and edit workflows, pools and
  policies;
- event senders (`scheduler.post_events`): post inbound events (POST /api/v1/events/) and nothing
  else: the token a provider's integration holds. Its events reach every job whose wait matches.
Superusers hold every permission. The groups `viewers`, `submitters`, `operators` and
`administrators` are created by migrations; operators and administrators also view everything,
and each of them includes the submitter's role.
"""

from __future__ import annotations

from typing import Any

SUBMIT = "scheduler.submit_job"
OPERATE = "scheduler.operate_job"
MANAGE = "scheduler.manage_definitions"
VIEW = "scheduler.view_all_jobs"
POST_EVENTS = "scheduler.post_events"

ROLE_GROUPS = {
    "viewers": ["view_all_jobs"],
    "submitters": ["submit_job"],
    "operators": ["submit_job", "operate_job", "view_all_jobs"],
    "administrators": ["submit_job", "operate_job", "manage_definitions", "view_all_jobs"],
    "event-senders": ["post_events"],
}


def can_submit(user: Any) -> bool:
    return bool(user and user.is_authenticated and (user.has_perm(SUBMIT) or can_operate(user)))


def can_operate(user: Any) -> bool:
    return bool(user and user.is_authenticated and (user.has_perm(OPERATE) or can_manage(user)))


def can_manage(user: Any) -> bool:
    return bool(user and user.is_authenticated and user.has_perm(MANAGE))


def can_view(user: Any) -> bool:
    """Viewers (and operators, administrators) read every job, the console and the definitions."""
    return bool(user and user.is_authenticated and (user.has_perm(VIEW) or can_operate(user)))


def can_read_all_jobs(user: Any) -> bool:
    """Viewers and operators see every job; a submitter sees only the jobs it submitted."""
    return can_view(user)


def role_groups_ensure() -> None:
    """Create the role groups with their permissions if missing (the migration does it too; the
    demo loader and the tests call this after a database flush)."""
    from django.contrib.auth.models import Group, Permission

    for name, codenames in ROLE_GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="scheduler", codename__in=codenames)
        )


def grant_in_migration(apps: Any, groups: dict[str, list[str]]) -> None:
    """From a migration: give each group (created if missing) these `scheduler` permissions,
    creating the permissions first (Django creates them only after the last migration)."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    for name, codenames in groups.items():
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.add(
            *permission_model.objects.filter(content_type__app_label="scheduler", codename__in=codenames)
        )


def content_types_relabel(models: tuple[str, ...], old: str, new: str) -> Any:
    """From a migration that moves models between apps in Django's state only: a RunPython step
    that relabels their content types from app `old` to `new` in place, so the permissions that
    point at them (held by users and groups) and the admin's log entries follow. A row already
    under the new label (only after a partial migrate) is left as it is."""

    def relabel(apps: Any, schema_editor: Any) -> None:
        content_type = apps.get_model("contenttypes", "ContentType")
        rows = content_type.objects.using(schema_editor.connection.alias)
        taken = set(rows.filter(app_label=new, model__in=models).values_list("model", flat=True))
        rows.filter(app_label=old, model__in=set(models) - taken).update(app_label=new)

    return relabel


def can_post_events(user: Any) -> bool:
    """Who may post inbound events: submitters (and above), and event senders."""
    return bool(user and user.is_authenticated and (user.has_perm(POST_EVENTS) or can_submit(user)))


def events_reach_every_job(user: Any) -> bool:
    """Whose events reach every job whose wait matches them (a submitter's reach its own only):
    operators, and event senders (a provider's integration knows no submitter)."""
    return bool(user and user.is_authenticated and (user.has_perm(POST_EVENTS) or can_operate(user)))
