"""End to end: the `sas` command's definitions (`apply`, list, get, delete), operator commands
(job actions, steps by name, the Needs-attention list and its bulk actions, the supervisor) and
`AsyncClient`, against the real service (`runserver`, `qcluster` and the sandbox remote of
tests/client/test_service.py's fixtures)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sas_client import AsyncClient, RetryEvent, RetryPolicy
from sas_client.openapi.api.jobs import jobs_read
from sas_client.openapi.models import Job

from scheduler.definitions import workflow_create
from tests.client import test_service as base
from tests.client.test_service import ORDER, Service, key_of, own_web, sas
from tests.factories import make_policy
from tests.processes import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

yaml = pytest.importorskip("yaml")

# The real service of test_service.py, started once for this module too.
service, demo, running = base.service, base.demo, base.running


def definitions(sandbox_url: str, max_attempts: int = 1) -> str:
    """A schedule of a workflow on a new pool and policy (in the wrong order: apply sorts them),
    as YAML documents."""
    charge = {"name": "charge", "pool": "apply_payments", "path": "/payments/charge", "policy": "apply_hold"}
    schedule = {"name": "nightly-charge", "workflow": "apply_charge", "cron": "0 3 * * *", "input": ORDER}
    return yaml.safe_dump_all(
        [
            {"kind": "schedule", **schedule},
            {"kind": "pool", "spec": {"name": "apply_payments", "kind": "http", "endpoints": [sandbox_url]}},
            {"kind": "policy", "name": "apply_hold", "max_attempts": max_attempts, "on_exhausted": "hold"},
            {
                "kind": "workflow",
                "name": "apply_charge",
                "description": "a charge that holds",
                "steps": [charge],
            },
        ]
    )


def test_apply_creates_then_leaves_alone_then_shows_a_change_without_making_it(
    demo: Service, tmp_path: Path
) -> None:
    """On a web server of its own: a server that outlived an earlier test's flush holds content
    types that no longer exist, and the admin log of a definition's change then fails."""
    admin = key_of("admin", "administrators")
    file = tmp_path / "defs.yaml"
    file.write_text(definitions(demo.sandbox.url))
    with own_web("apply") as url:
        at = Service(url=url, sandbox=demo.sandbox)
        first = sas(at, admin, "apply", "-f", str(file))
        assert first.returncode == 0, first.stderr
        # Dependencies first, whatever the file's order.
        assert first.stdout.splitlines() == [
            "create pool apply_payments",
            "create policy apply_hold",
            "create workflow apply_charge",
            "create schedule nightly-charge",
        ]
        again = sas(at, admin, "apply", "-f", str(file), "--json")
        assert again.returncode == 0, again.stderr
        assert {d["action"] for d in json.loads(again.stdout)["definitions"]} == {"unchanged"}
        assert "0 created, 0 changed, 4 unchanged" in again.stderr

        file.write_text(definitions(demo.sandbox.url, max_attempts=3))
        dry = sas(at, admin, "apply", "-f", str(file), "--dry-run")
        assert dry.returncode == 0, dry.stderr
        assert "change policy apply_hold\n  max_attempts: 1 -> 3\n" in dry.stdout
        assert "1 would be changed" in dry.stderr
        held = json.loads(sas(at, admin, "policies", "get", "apply_hold").stdout)
        assert held["max_attempts"] == 1 and held["version"] == 1  # the dry run changed nothing

        applied = sas(at, admin, "apply", "-f", str(file), "--json")
        actions = [d["action"] for d in json.loads(applied.stdout)["definitions"]]
        assert actions == ["unchanged", "change", "unchanged", "unchanged"]
        assert json.loads(sas(at, admin, "policies", "get", "apply_hold").stdout)["max_attempts"] == 3

        listed = sas(at, admin, "policies", "list")
        assert listed.returncode == 0 and "apply_hold" in listed.stdout and "MAX ATTEMPTS" in listed.stdout
        assert "apply_charge" in sas(at, admin, "workflows", "list").stdout
        paused = sas(at, admin, "schedules", "pause", "nightly-charge", "--json")
        assert paused.returncode == 0 and json.loads(paused.stdout)["paused"] is True
        resumed = sas(at, admin, "schedules", "resume", "nightly-charge", "--json")
        assert json.loads(resumed.stdout)["paused"] is False
        assert sas(at, admin, "schedules", "delete", "nightly-charge").returncode == 0
        gone = sas(at, admin, "schedules", "get", "nightly-charge")
        assert gone.returncode == 2 and "no schedule nightly-charge" in gone.stderr


def test_an_operator_finds_a_held_step_previews_a_bulk_retry_and_retries_it_by_name(
    demo: Service, running: Service
) -> None:
    ops = key_of("ops3")
    make_policy("apply_hold", max_attempts=1, on_exhausted="hold")
    charge = {"name": "charge", "pool": "payments", "path": "/payments/charge", "policy": "apply_hold"}
    workflow_create(name="apply_charge", steps=[charge])
    demo.sandbox.config(decline_over=100)
    try:
        job_id = sas(
            demo, ops, "jobs", "submit", "apply_charge", "--input", json.dumps({**ORDER, "amount": 250}), "-q"
        ).stdout.strip()

        def listed() -> dict[str, Any] | None:
            items = json.loads(
                sas(demo, ops, "attention", "list", "--workflow", "apply_charge", "--json").stdout
            )
            return next((i for i in items if i["job"] == job_id), None)

        item = wait_until(listed, timeout=60, message="the held charge on the attention list")
        step = json.loads(sas(demo, ops, "steps", "get", job_id, "charge", "--json").stdout)
        assert step["id"] == item["step"]["id"] and step["status"] == "held"

        preview = sas(
            demo, ops, "attention", "bulk", "retry", "--workflow", "apply_charge", "--dry-run", "--json"
        )
        assert preview.returncode == 0, preview.stderr
        result = json.loads(preview.stdout)
        assert result["dry_run"] is True and [i["step_id"] for i in result["items"]] == [step["id"]]
        assert (
            json.loads(sas(demo, ops, "steps", "get", job_id, str(step["id"]), "--json").stdout)["status"]
            == "held"
        )

        retried = sas(
            demo,
            ops,
            "steps",
            "retry",
            job_id,
            "charge",
            "--input",
            json.dumps({**ORDER, "amount": 50}),
            "--reason",
            "a smaller charge",
        )
        assert retried.returncode == 0, retried.stderr
    finally:
        demo.sandbox.config(decline_over=None)
    done = sas(demo, ops, "jobs", "wait", job_id, "--timeout", "90")
    assert done.returncode == 0, done.stderr
    missing = sas(demo, ops, "steps", "retry", job_id, "no_such_step")
    assert missing.returncode == 1 and "has no step 'no_such_step'" in missing.stderr


def test_job_actions_pause_resume_and_cancel_and_the_supervisor_status(
    demo: Service, running: Service
) -> None:
    ops = key_of("ops4")
    job_id = sas(
        demo, ops, "jobs", "submit", "order_approval", "--input", json.dumps({**ORDER, "amount": 500}), "-q"
    ).stdout.strip()
    paused = sas(demo, ops, "jobs", "pause", job_id, "--reason", "look first", "--json")
    assert paused.returncode == 0, paused.stderr
    assert json.loads(paused.stdout)["paused"] is True
    assert json.loads(sas(demo, ops, "jobs", "resume", job_id, "--json").stdout)["paused"] is False
    assert sas(demo, ops, "jobs", "cancel", job_id, "--reason", "not needed").returncode == 0
    assert sas(demo, ops, "jobs", "wait", job_id, "--timeout", "60").returncode == 3
    status = sas(demo, ops, "supervisor", "status")
    assert status.returncode == 0 and "lease holder" in status.stdout


# --- the async client and retries against the service's own 429s ----------------------------------


def test_the_async_client_and_its_generated_calls_wait_out_the_services_429s(demo: Service) -> None:
    """A web server of its own allowing one request a second: reads over it get a 429 with
    Retry-After, and the async client waits it out, facade and generated calls alike."""
    key = key_of("paced-async", "submitters")
    events: list[RetryEvent] = []

    async def scenario(url: str) -> tuple[Job, Job | Any, list[str]]:
        async with AsyncClient(
            url, key, on_retry=events.append, retry=RetryPolicy(attempts=8, jitter=0.2)
        ) as sas:
            job = await sas.submit("order_fulfilment", ORDER)
            read = await sas.get(str(job.id))
            typed = await jobs_read.asyncio(client=sas.api, job_id=job.id)
            ids = [str(j.id) async for j in sas.jobs(workflow="order_fulfilment")]
            return read, typed, ids

    with own_web("rates-async", SAS_THROTTLE_USER="60/min", SAS_THROTTLE_USER_BURST="1") as url:
        read, typed, ids = asyncio.run(scenario(url))
    assert isinstance(read, Job) and isinstance(typed, Job) and typed.id == read.id
    assert str(read.id) in ids
    throttled = [e for e in events if e.reason == "429"]
    assert throttled and all(e.retry_after is not None and e.wait >= e.retry_after >= 1 for e in throttled)


def test_sas_says_each_retry_on_stderr_when_the_service_answers_429(demo: Service, tmp_path: Path) -> None:
    """A dry run of three definitions reads three of them back to back: over one request a
    second, the service answers 429 and `sas` says so as it waits."""
    key = key_of("paced-cli")
    file = tmp_path / "defs.json"
    file.write_text(json.dumps([{"kind": "policy", "name": f"paced_{n}"} for n in range(3)]))
    with own_web("rates-cli", SAS_THROTTLE_USER="60/min", SAS_THROTTLE_USER_BURST="1") as url:
        result = sas(Service(url=url, sandbox=demo.sandbox), key, "apply", "-f", str(file), "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"create policy paced_{n}" for n in range(3)]
    assert "sas: retrying in " in result.stderr
    assert " s (attempt 2 of 5): 429 GET /api/v1/policies/paced_" in result.stderr
