"""Reads of remediation policies and their revisions (the API's policy endpoints)."""

from __future__ import annotations

from django.db.models import QuerySet

from sas_project.errors import NotFound
from scheduler.models import PolicyRevision, RemediationPolicy

# --- policies ---------------------------------------------------------------------------------


def policy_list() -> QuerySet[RemediationPolicy]:
    return RemediationPolicy.objects.order_by("name")


def policy_get(name: str) -> RemediationPolicy:
    policy = RemediationPolicy.objects.filter(name=name).first()
    if policy is None:
        raise NotFound(f"policy {name!r} does not exist")
    return policy


def policy_revisions(name: str) -> QuerySet[PolicyRevision]:
    """A policy's versions, newest first, with who made each."""
    policy = policy_get(name)
    return PolicyRevision.objects.filter(policy=policy).select_related("changed_by").order_by("-version")
