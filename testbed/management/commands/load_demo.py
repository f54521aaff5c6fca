"""`manage.py load_demo`: the demo's pools, policies and workflows (idempotent)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from agents.models import AgentPool
from agents.services import pool_save
from sas_project.conf import sas_settings
from sas_project.permissions import role_groups_ensure
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import RemediationPolicy
from supervisor.policies import policy_create

DEMO_ADMIN = ("admin", "admin-demo-password")


#: How many lines of `ship` did not succeed (their outputs are null). A JMESPath projection drops
#: null values, so the outputs are made strings first ("null" for a line that did not ship).
UNSHIPPED = "length(map(&to_string(@), results.ship)[?@ == 'null'])"


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
            pool = AgentPool.objects.filter(name=name).first()
            if pool is None:
                pool_save(name=name, **spec)
            elif sorted(pool.endpoints.values_list("url", flat=True)) != sorted(spec["endpoints"]):
                # Another --sandbox-url (or `make run DEMO_SANDBOX_PORT=...`) on an existing
                # database: the demo's pools follow it, keeping their limits.
                pool_save(
                    name=name,
                    **spec,
                    pool=pool,
                    max_in_flight=pool.max_in_flight,
                    max_per_second=pool.max_per_second,
                    rate=pool.rate,
                )
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
                    "(a reminder after 15 minutes, an hour at most, then compensate), charge, schedule "
                    "the shipment, then wait for the warehouse's `shipped` signal (a day at most, then "
                    "hold for an operator)."
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
                        # A reminder after a quarter of an hour without a decision.
                        "escalation": [{"after_seconds": 900, "do": "remind"}],
                        # The demo's one operator submits and approves its own orders; a real
                        # workflow leaves this off (separation of duties).
                        "allow_self_approval": True,
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
        self._order_lines()
        loaded = ["order_fulfilment", "order_approval", "refund", "order_lines", "noop_chain"]
        if options["broker"]:
            self._mixed(options["broker"])
            loaded.append("order_fulfilment_mixed")
        self.stdout.write(f"demo loaded: workflows {', '.join(loaded)}")
        if options["admin"]:
            user_model = get_user_model()
            username, password = DEMO_ADMIN
            if not user_model.objects.filter(username=username).exists():
                user_model.objects.create_superuser(username, "admin@example.invalid", password)
            # Where `make run` serves (SAS_PUBLIC_URL follows its DEMO_WEB_PORT).
            site = sas_settings.public_url or "http://127.0.0.1:8000"
            self.stdout.write(
                f"log in at {site}/admin/ and /ops/ as {username!r} "
                f"with password {password!r} (local demo only)"
            )

    def _order_lines(self) -> None:
        """The workflow language: an order of several lines that skips the charge when prepaid,
        ships each line (a fan-out that needs one line shipped), and refunds what did not ship
        through a sub-workflow, sending each remote only the fields it needs."""
        if workflow_latest("refund") is None:
            workflow_create(
                name="refund",
                description="Refund part of an order (run as a step of order_lines).",
                input_schema={
                    "type": "object",
                    "required": ["order", "unshipped"],
                    "properties": {
                        "order": {"type": "string"},
                        "unshipped": {"type": "integer", "minimum": 1},
                    },
                },
                steps=[
                    {
                        "name": "refund",
                        "pool": "payments",
                        "path": "/payments/refund",
                        "policy": "payments",
                        "input": {"order.$": "input.order", "lines.$": "input.unshipped"},
                    }
                ],
            )
        if workflow_latest("order_lines") is not None:
            return
        workflow_create(
            name="order_lines",
            description=(
                "Reserve, charge unless prepaid, ship each line (at most three at once; one shipped is "
                "enough), then refund the lines that could not ship through the `refund` workflow."
            ),
            input_schema={
                "type": "object",
                "required": ["order", "lines"],
                "properties": {
                    "order": {"type": "string"},
                    "prepaid": {"type": "boolean"},
                    "amount": {"type": "number", "minimum": 0},
                    "lines": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["sku", "quantity"],
                            "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}},
                        },
                    },
                },
            },
            steps=[
                {
                    "name": "reserve",
                    "pool": "inventory",
                    "path": "/inventory/reserve",
                    "compensation_path": "/inventory/release",
                    "policy": "standard",
                    "input": {"order.$": "input.order", "quantity.$": "sum(input.lines[].quantity)"},
                },
                {
                    "name": "charge",
                    "pool": "payments",
                    "path": "/payments/charge",
                    "compensation_path": "/payments/refund",
                    "policy": "payments",
                    "when": "!(input.prepaid)",
                    "input": {"order.$": "input.order", "amount.$": "input.amount"},
                    "depends_on": ["reserve"],
                },
                {
                    "name": "ship",
                    "pool": "shipping",
                    "path": "/shipping/schedule",
                    "compensation_path": "/shipping/cancel",
                    "policy": "standard",
                    "for_each": "input.lines",
                    "item_key": "item.sku",
                    "max_parallel": 3,
                    "join": {"mode": "at_least", "count": 1},
                    "input": {"order.$": "input.order", "sku.$": "item.sku", "quantity.$": "item.quantity"},
                    "depends_on": ["charge"],
                    "run_if_skipped": True,
                },
                {
                    "name": "refund_unshipped",
                    "kind": "workflow",
                    "workflow": "refund",
                    "when": "!(input.prepaid) && contains(results.ship, `null`)",
                    "input": {"order.$": "input.order", "unshipped.$": UNSHIPPED},
                    "depends_on": ["ship"],
                },
            ],
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
