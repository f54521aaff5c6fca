"""What the OpenAPI schema says beyond the views' own declarations (SPECTACULAR_SETTINGS).

- **Request examples.** `REQUEST_EXAMPLES` holds one realistic body per operation that takes one,
  keyed by operation ID; `add_request_examples` puts each beside its request schema. A test
  validates every example against its schema, so an example cannot outlive a field.
- **Rates.** `document_rates` adds the 429 answer, in the error shape the operation's other errors
  have, to every operation the throttles count (sas_project.throttling), and the RateLimit-*
  headers to its answers; the views with no throttle (the remotes' result callbacks) get neither.
  Which views are counted is read from the views themselves (`get_throttles()`), not listed here.
- **What the service sends** (OAS 3.1 `webhooks`): the completion callback, the alert webhook
  and the remote contract, in sas_project.openapi_webhooks (re-exported here, so that the settings
  name one module).
- **Nullable JSON.** `nullable_any` writes a nullable field of any JSON as the schema that
  accepts any value, null included (drf-spectacular's OAS 3.1 form refuses null).

Nothing here changes what the API does: it only describes it.
"""

from __future__ import annotations

import copy
from typing import Any

from sas_project.openapi_webhooks import (
    ALERT_WEBHOOK,
    ALERT_WEBHOOK_SCHEMA,
    COMPLETION_CALLBACK,
    REMOTE_CALL,
    REMOTE_CANCEL,
    REMOTE_STATUS_QUERY,
    complete_webhooks,
    operations,
)

__all__ = [
    "ALERT_WEBHOOK",
    "ALERT_WEBHOOK_SCHEMA",
    "COMPLETION_CALLBACK",
    "REMOTE_CALL",
    "REMOTE_CANCEL",
    "REMOTE_STATUS_QUERY",
    "REQUEST_EXAMPLES",
    "add_request_examples",
    "complete_webhooks",
    "document_rates",
    "nullable_any",
]

# --- any value, null included ---------------------------------------------------------------------

_NULLABLE_ANY = [{}, {"type": "null"}]


def _collapse_nullable_any(node: Any) -> None:
    if isinstance(node, dict):
        one_of = node.get("oneOf")
        if isinstance(one_of, list) and sorted(one_of, key=len) == _NULLABLE_ANY:
            del node["oneOf"]
        for value in node.values():
            _collapse_nullable_any(value)
    elif isinstance(node, list):
        for value in node:
            _collapse_nullable_any(value)


def nullable_any(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Postprocessing hook: a nullable field of any JSON (a JSONField with null=True) is any value.

    drf-spectacular writes it for OAS 3.1 as `oneOf: [{}, {"type": "null"}]`, which refuses null:
    null matches both branches, and oneOf wants exactly one. Any JSON value, null included, is
    the schema `{}`, which the field's other keywords (description, readOnly) then describe."""
    _collapse_nullable_any(result)
    return result


# --- request examples ---------------------------------------------------------------------------

_ORDER_INPUT = {
    "order_id": "A-1001",
    "customer_id": "C-2207",
    "sku": "BOOK-42",
    "quantity": 2,
    "amount": 59.8,
    "currency": "EUR",
}

#: The order workflow of `manage.py load_demo` (testbed), as an administrator would write it.
_ORDER_STEPS: list[dict[str, Any]] = [
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
        "escalation": [
            {"after_seconds": 900, "do": "remind"},
            {"after_seconds": 1800, "do": "reassign", "group": "finance-leads"},
        ],
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
        "name": "track",
        "kind": "repeat",
        "call": {"pool": "shipping", "path": "/shipping/track", "policy": "shipping"},
        "until": "output.state == 'delivered'",
        "interval_seconds": 3600,
        "max_iterations": 72,
        "on_exhausted": "hold",
        "depends_on": ["ship"],
    },
]

_PAYMENTS_POLICY = {
    "timeout_seconds": 5,
    "max_attempts": 4,
    "backoff_initial_seconds": 1,
    "backoff_multiplier": 2,
    "backoff_max_seconds": 10,
    "backoff_jitter": 0.5,
    "retry_on": ["transient_failure", "no_answer"],
    "reassign_after_attempts": 2,
    "on_exhausted": "compensate",
    "reconcile_before_retry": True,
    "step_budget_seconds": 120,
    "heartbeat_seconds": None,
}

_PAYMENTS_ENDPOINTS: list[Any] = [
    {
        "url": "https://payments-a.internal.example.com",
        "secret_header_name": "Authorization",
        "secret_header_value": "Bearer pay-a-3f9c1d",
    },
    "https://payments-b.internal.example.com",
]

_NIGHTLY_SCHEDULE = {
    "workflow": "order_fulfilment",
    "input": {
        "order_id": "REPLENISH-NIGHTLY",
        "sku": "BOOK-42",
        "quantity": 50,
        "amount": 0,
        "currency": "EUR",
    },
    "business_key": "nightly replenishment",
    "priority": -10,
    "run_at": None,
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "catch_up": "once",
    "overlap": "skip",
    "jitter_seconds": 300,
    "pause_after_failures": 3,
}

_ALERT_SUBSCRIPTION = {
    "webhook_url": "https://hooks.example.com/sas/alerts",
    "email": "payments-oncall@example.com",
    "kinds": ["step_needs_attention", "job_failed", "circuit_opened", "supervisor_stale"],
    "enabled": True,
}

#: One request body per operation that takes one, by operation ID (tests/api/test_openapi.py
#: checks that every such operation has one and that each validates against its schema).
REQUEST_EXAMPLES: dict[str, dict[str, Any]] = {
    "jobs_submit": {
        "workflow": "order_fulfilment",
        "input": _ORDER_INPUT,
        "callback_url": "https://shop.example.com/hooks/sas",
        "business_key": "order A-1001",
        "priority": 10,
    },
    "jobs_submit_batch": {
        "jobs": [
            {
                "workflow": "order_fulfilment",
                "input": {**_ORDER_INPUT, "order_id": "A-1002", "quantity": 1, "amount": 29.9},
                "idempotency_key": "order-A-1002",
                "business_key": "order A-1002",
                "callback_url": "https://shop.example.com/hooks/sas",
            },
            {
                "workflow": "order_fulfilment",
                "input": {**_ORDER_INPUT, "order_id": "A-1003", "sku": "PEN-7", "amount": 149.0},
                "idempotency_key": "order-A-1003",
                "business_key": "order A-1003",
                "priority": 5,
            },
        ]
    },
    "jobs_cancel": {"reason": "customer cancelled order A-1001 before shipping"},
    "jobs_compensate": {"reason": "payment disputed by the bank: undo the order"},
    "jobs_pause": {"reason": "warehouse stock-take until 14:00"},
    "jobs_resume": {"reason": "stock-take finished"},
    "jobs_rerun": {
        "from_step": "ship",
        "reason": "the carrier fixed its address check",
        "version": "current",
    },
    "jobs_signals_send": {"name": "shipped", "payload": {"carrier": "DHL", "tracking": "JD014600003SE"}},
    "events_receive_signed": {
        "type": "payment.succeeded",
        "timestamp": "2026-12-06T10:00:00Z",
        "data": {"order": "order-1001", "amount": 120},
    },
    "signals_send_by_key": {
        "business_key": "order-1001",
        "workflow": "order-fulfilment",
        "name": "payment",
        "payload": {"amount": 120, "currency": "EUR"},
    },
    "events_receive": {
        "type": "order.paid",
        "id": "pay-7781",
        "source": "payments",
        "data": {"order_id": "A-1001", "amount": 59.8, "currency": "EUR"},
    },
    "events_replay": {"reason": "the fulfilment trigger was fixed (INC-2240): start the order again"},
    "jobs_steps_approve": {"comment": "amount checked against the customer's credit limit"},
    "jobs_steps_reject": {"comment": "amount above the customer's credit limit"},
    "steps_retry": {"pool": "payments-dr", "reason": "the primary payment gateway is down (INC-2231)"},
    "steps_resolve": {
        "output": {"shipment_id": "SHP-778812", "carrier": "DHL"},
        "reason": "shipment booked by phone with the carrier",
    },
    "attention_bulk": {
        "action": "retry",
        "step_ids": [4812, 4815, 4821],
        "reason": "payment gateway back after INC-2231",
        "dry_run": True,
    },
    "attempts_callback": {
        "outcome": "succeeded",
        "output": {"charge_id": "ch_3PqK8e", "amount": 59.8, "currency": "EUR"},
    },
    "attempts_heartbeat": {"details": {"stage": "authorising", "captured": 0, "of": 59.8}},
    "workflows_create": {
        "name": "order_fulfilment",
        "description": (
            "Reserve inventory, wait for an operator's approval of a charge above 100, charge the "
            "payment, schedule the shipment."
        ),
        "deadline_seconds": 86400,
        "sla_seconds": 14400,
        "warn_fraction": 0.75,
        "input_schema": {
            "type": "object",
            "required": ["order_id", "sku", "quantity", "amount"],
            "properties": {
                "order_id": {"type": "string"},
                "sku": {"type": "string"},
                "quantity": {"type": "integer", "minimum": 1},
                "amount": {"type": "number", "minimum": 0},
            },
        },
        "steps": _ORDER_STEPS,
    },
    "workflows_replace": {
        "description": "Reserve, approve above 100, charge, ship (the charge now has a day's budget).",
        "deadline_seconds": 172800,
        "steps": _ORDER_STEPS,
    },
    "workflows_update": {"description": "Reserve, approve above 100, charge, ship.", "sla_seconds": 7200},
    "pools_create": {
        "name": "payments",
        "kind": "http",
        "endpoints": _PAYMENTS_ENDPOINTS,
        "alternate": "payments-dr",
        "max_in_flight": 50,
        "max_per_second": 20,
        "rate": {"key": "input.merchant", "per_second": 5, "burst": 10},
    },
    "pools_replace": {
        "kind": "http",
        "endpoints": _PAYMENTS_ENDPOINTS,
        "alternate": "payments-dr",
        "max_in_flight": 80,
        "max_per_second": None,
        "rate": None,
    },
    "pools_update": {"max_in_flight": 80},
    "policies_create": {"name": "payments", **_PAYMENTS_POLICY},
    "policies_replace": {**_PAYMENTS_POLICY, "max_attempts": 6},
    "policies_update": {"max_attempts": 6, "backoff_max_seconds": 30},
    "schedules_create": {"name": "nightly-replenishment", **_NIGHTLY_SCHEDULE},
    "schedules_replace": {**_NIGHTLY_SCHEDULE, "cron": "30 2 * * *"},
    "schedules_update": {"cron": "30 2 * * *", "catch_up": "skip", "overlap": "buffer_one"},
    "schedules_backfill": {"start": "2026-03-01T00:00:00Z", "end": "2026-03-03T23:59:59Z"},
    "alerts_create": {"name": "payments-oncall", **_ALERT_SUBSCRIPTION},
    "alerts_replace": {**_ALERT_SUBSCRIPTION, "kinds": ["job_failed", "job_compensated"]},
    "alerts_update": {"enabled": False},
    "tokens_create": {"name": "ci-deploys", "lifetime_days": 30},
    "tokens_revoke": {},
}


def add_request_examples(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: each request body's example from REQUEST_EXAMPLES, on every media
    type it is documented with. An operation without one is left as it is (the test names it)."""
    for _path, _method, operation in operations(result):
        example = REQUEST_EXAMPLES.get(operation.get("operationId", ""))
        body = operation.get("requestBody")
        if example is None or body is None:
            continue
        for media in body.get("content", {}).values():
            media["examples"] = {"example": {"summary": "A typical request", "value": copy.deepcopy(example)}}
    return result


# --- rates --------------------------------------------------------------------------------------

#: The RateLimit-* fields (docs/api.md, "Rates, and what a client should do on 429").
RATE_LIMIT_HEADERS: dict[str, dict[str, Any]] = {
    "RateLimit-Limit": {
        "description": (
            "The most requests let through at once (the burst: SAS_THROTTLE_USER_BURST for a "
            "signed-in user, SAS_THROTTLE_ANON_BURST per address for anonymous requests). Sent on "
            "every answer whose request was counted: not on a 401, nor on a 403 of the role check, "
            "which come before counting."
        ),
        "schema": {"type": "integer", "minimum": 1},
    },
    "RateLimit-Remaining": {
        "description": "How many requests the client may still send at once.",
        "schema": {"type": "integer", "minimum": 0},
    },
    "RateLimit-Reset": {
        "description": "Seconds until the client may send a full burst again.",
        "schema": {"type": "integer", "minimum": 0},
    },
}
RETRY_AFTER_HEADER: dict[str, Any] = {
    "description": (
        "Seconds to wait before sending anything more with this token (or from this address). "
        "When 429s repeat, wait this long plus a random part."
    ),
    "schema": {"type": "integer", "minimum": 0},
}
RATE_LIMITED_DESCRIPTION = (
    "Too many requests (`code`: `throttled`): over the user's rate (SAS_THROTTLE_USER, or "
    "SAS_THROTTLE_ANON per address when anonymous). Wait `Retry-After` seconds; submit many jobs "
    "through `POST /api/v1/jobs/batch/`."
)


def _header_ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/headers/{name}"}


def countedoperations(generator: Any) -> set[tuple[str, str]]:
    """(path, method) of every operation whose view has a throttle: what the rates count. Read
    from the views as DRF runs them (`APIView.get_throttles()`)."""
    if generator is None or getattr(generator, "endpoints", None) is None:
        raise RuntimeError("document_rates runs as a postprocessing hook of drf-spectacular's generator")
    counted: set[tuple[str, str]] = set()
    for path, _regex, method, callback in generator.endpoints:
        view_class = getattr(callback, "cls", None)
        if view_class is not None and view_class().get_throttles():
            counted.add((path, method.lower()))
    return counted


def _error_content(responses: dict[str, Any]) -> dict[str, Any]:
    """The body of the operation's other errors (sas_project.api.errors()): the 429 answers in
    the same shape, so a change of that shape reaches it too."""
    for code in ("401", "403", "400", "404", "409", "413"):
        response = responses.get(code)
        if response and "content" in response:
            return copy.deepcopy(response["content"])
    raise RuntimeError("a counted operation documents no error answer whose shape a 429 could share")


def document_rates(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Postprocessing hook: the 429 and the RateLimit-* headers on every counted operation."""
    counted = countedoperations(generator)
    headers = result.setdefault("components", {}).setdefault("headers", {})
    headers.update(copy.deepcopy(RATE_LIMIT_HEADERS))
    headers["Retry-After"] = copy.deepcopy(RETRY_AFTER_HEADER)
    rate_headers = {name: _header_ref(name) for name in RATE_LIMIT_HEADERS}
    for path, method, operation in operations(result):
        if (path, method) not in counted:
            continue
        responses = operation["responses"]
        responses["429"] = {
            "description": RATE_LIMITED_DESCRIPTION,
            "headers": {"Retry-After": _header_ref("Retry-After"), **rate_headers},
            "content": _error_content(responses),
        }
        for code, response in list(responses.items()):
            # A 401 is refused before counting (authentication comes first).
            if code != "401":
                responses[code] = {**response, "headers": {**response.get("headers", {}), **rate_headers}}
    return result
