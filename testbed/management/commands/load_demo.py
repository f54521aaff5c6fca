"""`manage.py load_demo`: the demo's pools, policies and workflows (idempotent)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from agents.models import AgentPool
from agents.services import pool_save
from sas_project.permissions import role_groups_ensure
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import RemediationPolicy
from supervisor.policies import policy_create

DEMO_ADMIN = ("admin", "admin-demo-password")


class Command(BaseCommand):
    help = (
        "Load the demo: sandbox pools, remediation policies and the order_fulfilment and order_approval "
        "workflows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--sandbox-url", default="http://127.0.0.1:8100")
        parser.add_argument(
            "--backup-url",
            default="http://localhost:8100",
            help="Endpoint of the alternate payments pool (same sandbox by default).",
        )
        parser.add_argument("--admin", action="store_true", help="Create the demo admin user if missing.")
        parser.add_argument(
            "--broker",
            default="",
            help="A broker URL (redis://host:port/0): also load a queue pool and the order_fulfilment_mixed "
            "workflow, whose charge answers later (HTTP 202 + callback) and whose shipping goes through "
            "the sandbox's queue consumer.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        role_groups_ensure()
        url = options["sandbox_url"]
        pools: dict[str, dict[str, Any]] = {
            "inventory": {"endpoints": [url]},
            "payments-backup": {"endpoints": [options["backup_url"]]},
            "payments": {"endpoints": [url], "alternate": "payments-backup"},
            "shipping": {"endpoints": [url]},
            "local": {"kind": "python", "endpoints": []},
        }
        for name, spec in pools.items():
            if not AgentPool.objects.filter(name=name).exists():
                pool_save(name=name, **spec)
        policies = {
            "standard": {
                "timeout_seconds": 5,
                "max_attempts": 4,
                "backoff_initial_seconds": 1,
                "backoff_multiplier": 2,
                "backoff_max_seconds": 10,
                "on_exhausted": "compensate",
            },
            "payments": {
                "timeout_seconds": 5,
                "max_attempts": 4,
                "backoff_initial_seconds": 1,
                "backoff_multiplier": 2,
                "backoff_max_seconds": 10,
                "reassign_after_attempts": 2,
                "reconcile_before_retry": True,
                "on_exhausted": "compensate",
            },
            "shipping": {
                "timeout_seconds": 5,
                "max_attempts": 3,
                "backoff_initial_seconds": 2,
                "backoff_multiplier": 2,
                "backoff_max_seconds": 20,
                "reconcile_before_retry": True,
                "on_exhausted": "hold",
            },
            "fast": {
                "timeout_seconds": 5,
                "max_attempts": 3,
                "backoff_initial_seconds": 0.1,
                "backoff_multiplier": 2,
                "backoff_max_seconds": 1,
                "on_exhausted": "fail",
            },
        }
        for name, fields in policies.items():
            if not RemediationPolicy.objects.filter(name=name).exists():
                policy_create(name=name, actor=None, **fields)
        if workflow_latest("order_fulfilment") is None:
            workflow_create(
                name="order_fulfilment",
                description="Reserve inventory, charge the payment, schedule the shipment.",
                steps=[
                    {
                        "name": "reserve",
                        "pool": "inventory",
                        "path": "/inventory/reserve",
                        "status_path": "/inventory/reservations/{operation_id}",
                        "compensation_path": "/inventory/release",
                        "policy": "standard",
                    },
                    {
                        "name": "charge",
                        "pool": "payments",
                        "path": "/payments/charge",
                        "status_path": "/payments/{operation_id}",
                        "compensation_path": "/payments/refund",
                        "depends_on": ["reserve"],
                        "policy": "payments",
                    },
                    {
                        "name": "ship",
                        "pool": "shipping",
                        "path": "/shipping/schedule",
                        "status_path": "/shipping/shipments/{operation_id}",
                        "compensation_path": "/shipping/cancel",
                        "depends_on": ["charge"],
                        "policy": "shipping",
                    },
                ],
            )
        if workflow_latest("noop_chain") is None:
            workflow_create(
                name="noop_chain",
                description="Three in-process no-op steps in a row.",
                steps=[
                    {"name": "a", "pool": "local", "path": "agents.builtin.noop", "policy": "fast"},
                    {
                        "name": "b",
                        "pool": "local",
                        "path": "agents.builtin.noop",
                        "policy": "fast",
                        "depends_on": ["a"],
                    },
                    {
                        "name": "c",
                        "pool": "local",
                        "path": "agents.builtin.noop",
                        "policy": "fast",
                        "depends_on": ["b"],
                    },
                ],
            )
        if workflow_latest("order_approval") is None:
            workflow_create(
                name="order_approval",
                description=(
                    "A long-running order: reserve, wait for an operator's approval of a charge above 100 "
                    "(an hour at most, then compensate), charge, schedule the shipment, then wait for "
                    "the warehouse's `shipped` signal (a day at most, then hold for an operator)."
                ),
                steps=[
                    {
                        "name": "reserve",
                        "pool": "inventory",
                        "path": "/inventory/reserve",
                        "status_path": "/inventory/reservations/{operation_id}",
                        "compensation_path": "/inventory/release",
                        "policy": "standard",
                    },
                    {
                        "name": "approve_charge",
                        "kind": "approval",
                        "when": "input.amount > `100`",
                        "timeout_seconds": 3600,
                        "on_timeout": "fail",
                        "depends_on": ["reserve"],
                    },
                    {
                        "name": "charge",
                        "pool": "payments",
                        "path": "/payments/charge",
                        "status_path": "/payments/{operation_id}",
                        "compensation_path": "/payments/refund",
                        "depends_on": ["approve_charge"],
                        "run_if_skipped": True,
                        "policy": "payments",
                    },
                    {
                        "name": "ship",
                        "pool": "shipping",
                        "path": "/shipping/schedule",
                        "status_path": "/shipping/shipments/{operation_id}",
                        "compensation_path": "/shipping/cancel",
                        "depends_on": ["charge"],
                        "policy": "shipping",
                    },
                    {
                        "name": "shipped",
                        "kind": "signal",
                        "signal": "shipped",
                        "timeout_seconds": 86400,
                        "on_timeout": "hold",
                        "depends_on": ["ship"],
                    },
                ],
            )
        loaded = ["order_fulfilment", "order_approval", "noop_chain"]
        if options["broker"]:
            self._mixed(options["broker"])
            loaded.append("order_fulfilment_mixed")
        self.stdout.write(f"demo loaded: workflows {', '.join(loaded)}")
        if options["admin"]:
            user_model = get_user_model()
            username, password = DEMO_ADMIN
            if not user_model.objects.filter(username=username).exists():
                user_model.objects.create_superuser(username, "admin@example.invalid", password)
            self.stdout.write(
                f"log in at http://127.0.0.1:8000/admin/ and /ops/ as {username!r} "
                f"with password {password!r} (local demo only)"
            )

    def _mixed(self, broker: str) -> None:
        """Every agent kind in one job: a synchronous HTTP step, an HTTP step the remote answers
        later (202, then a POST to the callback URL), and a step sent as a message on a queue."""
        # The broker's port changes from one `make run` to the next: always point the pool at it.
        pool_save(
            name="shipping-queue",
            kind="queue",
            endpoints=[broker],
            pool=AgentPool.objects.filter(name="shipping-queue").first(),
        )
        if not RemediationPolicy.objects.filter(name="later").exists():
            policy_create(
                name="later",
                actor=None,
                timeout_seconds=30,
                max_attempts=4,
                backoff_initial_seconds=1,
                backoff_multiplier=2,
                backoff_max_seconds=10,
                reconcile_before_retry=True,
                on_exhausted="compensate",
            )
        if workflow_latest("order_fulfilment_mixed") is None:
            workflow_create(
                name="order_fulfilment_mixed",
                description="Reserve (HTTP), charge (HTTP, result reported later), ship (queue).",
                steps=[
                    {
                        "name": "reserve",
                        "pool": "inventory",
                        "path": "/inventory/reserve",
                        "status_path": "/inventory/reservations/{operation_id}",
                        "compensation_path": "/inventory/release",
                        "policy": "standard",
                    },
                    {
                        "name": "charge",
                        "pool": "payments",
                        "path": "/async/payments/charge",
                        "status_path": "/payments/{operation_id}",
                        "compensation_path": "/payments/refund",
                        "depends_on": ["reserve"],
                        "policy": "later",
                    },
                    {
                        "name": "ship",
                        "pool": "shipping-queue",
                        "path": "shipping.schedule",
                        "status_path": "shipping.status",
                        "compensation_path": "shipping.cancel",
                        "depends_on": ["charge"],
                        "policy": "later",
                    },
                ],
            )
