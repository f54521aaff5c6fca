"""What the benchmark creates: its pools, policies and workflows, and its API client."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from sas_project.permissions import role_groups_ensure
from sas_project.tokens.services import token_create
from scheduler.models import Workflow
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow

PYTHON_POOL = "bench-local"
HTTP_POOL = "bench-remote"
POLICY = "bench"
SCAN_POLICY = "bench-scan"
SINGLE = "bench_single"
#: One timer step (testbed.bench.waits).
TIMER = "bench_timer"
#: One step fanning out over `input.items` (testbed.bench.fanout).
FAN_OUT = "bench_fan_out"
#: The same HTTP chain with and without a concurrency key (testbed.bench.keyed).
KEYED = "bench_keyed"
UNKEYED = "bench_unkeyed"
CLIENT = "bench-client"
#: The sandbox's services, one per step of the HTTP chain (each has its own ledger of effects).
HTTP_PATHS = ("/inventory/reserve", "/payments/charge", "/shipping/schedule")
HTTP_INPUT = {"sku": "BENCH", "quantity": 1, "amount": 10}


def python_chain(steps: int) -> str:
    return f"bench_chain_{steps}"


def http_chain(steps: int) -> str:
    return f"bench_http_{steps}"


#: The workflows of the jobs the benchmark creates (and may delete or settle).
OWN_WORKFLOWS = [
    SINGLE,
    TIMER,
    FAN_OUT,
    KEYED,
    UNKEYED,
    *(python_chain(n) for n in range(1, 21)),
    *(http_chain(n) for n in range(1, 21)),
]


def ensure_definitions(steps: int, remote_url: str) -> tuple[Workflow, Workflow]:
    """The python and HTTP chains of `steps` steps, and the single-step workflow of the scan."""
    ensure_pool(PYTHON_POOL, kind="python")
    ensure_pool(HTTP_POOL, kind="http", endpoints=[remote_url])
    ensure_policy(POLICY, timeout_seconds=30, max_attempts=3, on_exhausted="fail")
    ensure_policy(
        SCAN_POLICY,
        timeout_seconds=60,
        max_attempts=5,
        backoff_initial_seconds=3600,
        backoff_max_seconds=3600,
        on_exhausted="hold",
    )
    python = ensure_workflow(
        python_chain(steps),
        [
            {
                "name": f"s{i}",
                "pool": PYTHON_POOL,
                "path": "agents.builtin.noop",
                "policy": POLICY,
                "depends_on": [f"s{i - 1}"] if i > 1 else [],
            }
            for i in range(1, steps + 1)
        ],
    )
    http = ensure_workflow(
        http_chain(steps),
        [
            {
                "name": f"s{i}",
                "pool": HTTP_POOL,
                "path": HTTP_PATHS[(i - 1) % len(HTTP_PATHS)],
                "policy": POLICY,
                "depends_on": [f"s{i - 1}"] if i > 1 else [],
            }
            for i in range(1, steps + 1)
        ],
    )
    ensure_workflow(
        SINGLE,
        [{"name": "s1", "pool": PYTHON_POOL, "path": "agents.builtin.noop", "policy": SCAN_POLICY}],
    )
    return python, http


def api_token() -> str:
    """A submitter's API token, as a client system would hold one."""
    role_groups_ensure()
    user, _ = get_user_model().objects.get_or_create(username=CLIENT)
    from django.contrib.auth.models import Group

    user.groups.add(Group.objects.get(name="submitters"))
    _, key = token_create(user=user, name="bench")
    return key
