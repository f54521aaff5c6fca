"""What the OpenAPI schema says beyond the views' own declarations (SPECTACULAR_SETTINGS).

- **Request examples.** `REQUEST_EXAMPLES` holds one realistic body per operation that takes one,
  keyed by operation ID; `add_request_examples` puts each beside its request schema. A test
  validates every example against its schema, so an example cannot outlive a field.
- **Rates.** `document_rates` adds the 429 answer, in the error shape the operation's other errors
  have, to every operation the throttles count (sas_project.throttling), and the RateLimit-*
  headers to its answers; the views with no throttle (the remotes' result callbacks) get neither.
  Which views are counted is read from the views themselves (`get_throttles()`), not listed here.
- **What the service sends** (OAS 3.1 `webhooks`, `WEBHOOKS`): the job's completion callback, the
  alert webhook, and the remote contract: the call an HTTP remote receives (with the OAS
  `callbacks` by which a remote that answered 202 reports its result and heartbeats later) and
  the status query. Their bodies are the JSON Schemas below; the tests validate what the
  service's own code builds (scheduler.outbox, supervisor.alerts, the claim's payload as
  agents.http sends it) against them. The queue agent's messages are in docs/asyncapi.yaml.

- **Nullable JSON.** `nullable_any` writes a nullable field of any JSON as the schema that
  accepts any value, null included (drf-spectacular's OAS 3.1 form refuses null).

Nothing here changes what the API does: it only describes it.
"""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.utils import OpenApiWebhook

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
    "workflows_update": {"description": "Reserve, approve above 100, charge, ship."},
    "pools_create": {
        "name": "payments",
        "kind": "http",
        "endpoints": _PAYMENTS_ENDPOINTS,
        "alternate": "payments-dr",
        "max_in_flight": 50,
        "max_per_second": 20,
    },
    "pools_replace": {
        "kind": "http",
        "endpoints": _PAYMENTS_ENDPOINTS,
        "alternate": "payments-dr",
        "max_in_flight": 80,
        "max_per_second": None,
    },
    "pools_update": {"max_in_flight": 80},
    "policies_create": {"name": "payments", **_PAYMENTS_POLICY},
    "policies_replace": {**_PAYMENTS_POLICY, "max_attempts": 6},
    "policies_update": {"max_attempts": 6, "backoff_max_seconds": 30},
    "schedules_create": {"name": "nightly-replenishment", **_NIGHTLY_SCHEDULE},
    "schedules_replace": {**_NIGHTLY_SCHEDULE, "cron": "30 2 * * *"},
    "schedules_update": {"cron": "30 2 * * *", "catch_up": "skip"},
    "alerts_create": {"name": "payments-oncall", **_ALERT_SUBSCRIPTION},
    "alerts_replace": {**_ALERT_SUBSCRIPTION, "kinds": ["job_failed", "job_compensated"]},
    "alerts_update": {"enabled": False},
    "tokens_create": {"name": "ci-deploys", "lifetime_days": 30},
    "tokens_revoke": {},
}

_METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")


def _operations(result: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, operation)
        for path, item in result.get("paths", {}).items()
        for method, operation in item.items()
        if method in _METHODS
    ]


def add_request_examples(
    result: dict[str, Any], generator: Any, request: Any, public: bool
) -> dict[str, Any]:
    """Postprocessing hook: each request body's example from REQUEST_EXAMPLES, on every media
    type it is documented with. An operation without one is left as it is (the test names it)."""
    for _path, _method, operation in _operations(result):
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


def counted_operations(generator: Any) -> set[tuple[str, str]]:
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
    counted = counted_operations(generator)
    headers = result.setdefault("components", {}).setdefault("headers", {})
    headers.update(copy.deepcopy(RATE_LIMIT_HEADERS))
    headers["Retry-After"] = copy.deepcopy(RETRY_AFTER_HEADER)
    rate_headers = {name: _header_ref(name) for name in RATE_LIMIT_HEADERS}
    for path, method, operation in _operations(result):
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


# --- what the service sends ------------------------------------------------------------------------

_ANY_JSON: dict[str, Any] = {"description": "Any JSON value."}
_DATE_TIME_OR_NULL: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}

#: The body of a job's completion callback (scheduler.outbox.callback_summary; restated in
#: scheduler/sql/postgresql/sas_record_outcome.sql).
COMPLETION_CALLBACK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A job settled: its summary, POSTed to the job's `callback_url`.",
    "properties": {
        "id": {"type": "string", "format": "uuid", "description": "The job's ID."},
        "workflow": {"type": "string", "description": "The workflow's name."},
        "status": {
            "type": "string",
            "enum": ["succeeded", "failed", "compensated", "cancelled"],
            "description": "The status it settled in (once each: the message's key is `<job id>:<status>`).",
        },
        "result": {**_ANY_JSON, "description": "The job's result (null unless it succeeded)."},
        "finished_at": {**_DATE_TIME_OR_NULL, "description": "When it settled (ISO 8601)."},
    },
    "required": ["id", "workflow", "status", "result", "finished_at"],
    "additionalProperties": False,
}


def _alert(kinds: list[str], description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "properties": {"alert": {"type": "string", "enum": kinds}, **properties},
        "required": ["alert", *properties],
        "additionalProperties": False,
    }


#: The body of an alert webhook (supervisor.alerts: `{"alert": <kind>, ...}`, the fields of its
#: kind). The same body is the text of an alert email.
ALERT_WEBHOOK_SCHEMA: dict[str, Any] = {
    "description": "An alert for a subscription that wants its kind, POSTed to its `webhook_url`.",
    "oneOf": [
        _alert(
            ["step_needs_attention", "job_failed", "job_compensated", "approval_requested"],
            "A job's event: a step held for an operator, a job failed or compensated, an approval asked for.",
            {
                "job_id": {"type": "string", "format": "uuid"},
                "step_id": {
                    "type": ["integer", "null"],
                    "description": "The step, when the event names one.",
                },
                "attempt": {
                    "type": ["integer", "null"],
                    "description": "The attempt, when the event names one.",
                },
                "event": {"type": "string", "description": "The event's kind (step_held, job_failed...)."},
                "reason": {"type": "string", "description": "Why, as recorded in the job's history."},
            },
        ),
        _alert(
            ["circuit_opened"],
            "An endpoint failed too often: calls avoid it until `open_until`.",
            {
                "endpoint_id": {"type": "integer"},
                "endpoint": {"type": "string", "description": "The endpoint's URL."},
                "open_until": {"type": "string", "format": "date-time"},
            },
        ),
        _alert(
            ["supervisor_stale"],
            "The supervisor's last scan is older than three intervals.",
            {
                "holder": {"type": "string", "description": "The cluster that holds the supervisor's lease."},
                "last_scan_at": {"type": "string", "format": "date-time"},
                "lease_expires_at": _DATE_TIME_OR_NULL,
            },
        ),
        _alert(
            ["quarantined"],
            "A supervision loop set one item aside because handling it raised; the rest went on.",
            {
                "loop": {
                    "type": "string",
                    "enum": ["remediation", "job_deadlines", "waits", "children", "schedules", "retention"],
                },
                "job_id": {
                    "type": ["string", "null"],
                    "format": "uuid",
                    "description": "The job, when it names one.",
                },
                "step_id": {"type": ["integer", "null"], "description": "The step, when it names one."},
                "subject": {"type": "string", "description": "What else names the item (a schedule)."},
                "action": {
                    "type": "string",
                    "description": (
                        "What the loop did with it: held (the step, for an operator), needs_attention, "
                        "moved_on or schedule_paused (a schedule), not_archived, skipped."
                    ),
                },
                "error": {"type": "string", "description": "The error, its type first."},
            },
        ),
        _alert(
            ["supervisor_not_remediating"],
            "The lease holder renews its lease but left remediable steps overdue too long (once per term).",
            {
                "holder": {"type": "string", "description": "The cluster that held the lease."},
                "token": {"type": "integer", "description": "Its fencing token."},
                "debt_steps": {"type": "integer", "minimum": 1},
                "oldest_seconds": {"type": "number", "description": "How long the oldest has been due."},
                "threshold_seconds": {"type": "number"},
                "taken_over_by": {
                    "type": ["string", "null"],
                    "description": "The cluster that took the lease over; null when none could.",
                },
            },
        ),
        _alert(
            ["archive_failed"],
            "The history archive cannot be written (once per run of failures).",
            {
                "location": {"type": "string", "description": "Where the archive is written."},
                "error": {"type": "string"},
                "failures": {"type": "integer", "minimum": 1},
                "retry_at": {"type": "string", "format": "date-time"},
            },
        ),
        _alert(
            ["canary_unremediated"],
            "The canary job (which succeeds only through the supervisor's retry) did not succeed in "
            "its expected time (once per run of failures).",
            {
                "job_id": {"type": "string", "format": "uuid"},
                "status": {"type": "string", "description": "The canary job's status."},
                "submitted_at": {"type": "string", "format": "date-time"},
                "age_seconds": {"type": "number", "minimum": 0},
                "expected_seconds": {"type": "number", "minimum": 0},
            },
        ),
    ],
}

#: The body of a call to an HTTP remote (scheduler.services.claims.attempt_claim builds it,
#: agents.http POSTs it).
REMOTE_CALL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "One attempt of one step. Every attempt of the step carries the same `operation_id` (also "
        "the `Idempotency-Key` header) and the same body: do the operation at most once per "
        "operation ID, and answer a repeat with the first result."
    ),
    "properties": {
        "job_id": {"type": "string", "format": "uuid"},
        "step": {"type": "string", "description": "The step's name in its workflow."},
        "operation_id": {"type": "string", "description": "The operation's key: the same for every attempt."},
        "attempt": {"type": "integer", "minimum": 1, "description": "This attempt's number (X-SAS-Attempt)."},
        "input": {
            **_ANY_JSON,
            "description": (
                "The job's input (an object); with the step's input mapping, whatever the mapping "
                "builds from `input` and `results`."
            ),
        },
        "results": {
            "type": "object",
            "additionalProperties": True,
            "description": (
                "The outputs of the steps this one depends on (directly or not), by step name. "
                "Absent when the step has an input mapping."
            ),
        },
        "item": {**_ANY_JSON, "description": "A fan-out item: the element of `for_each` this call is for."},
        "index": {"type": "integer", "minimum": 0, "description": "A fan-out item: its position."},
        "compensates": {
            "type": "string",
            "description": "A compensation (to the step's compensation path): the operation ID it undoes.",
        },
        "original_output": {
            **_ANY_JSON,
            "description": "A compensation: what the undone operation answered.",
        },
        "heartbeat_details": {
            **_ANY_JSON,
            "description": (
                "The details of the last heartbeat an earlier attempt of this operation sent: "
                "where to resume. Absent until one sent details."
            ),
        },
    },
    "required": ["job_id", "step", "operation_id", "attempt", "input"],
    "additionalProperties": False,
}


def _header(
    description: str, *, required: bool = True, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"description": description, "required": required, "schema": schema or {"type": "string"}}


#: Headers of the completion callback and the alert webhook (supervisor.deliveries, supervisor.signing).
DELIVERY_HEADERS: dict[str, dict[str, Any]] = {
    "webhook-id": _header(
        "The message's key, the same on every try of one message (`<job id>:<status>` for a "
        "callback): de-duplicate on it."
    ),
    "webhook-timestamp": _header(
        "When this try was sent (Unix seconds; each try is signed anew): refuse a message far from "
        "your clock (5 minutes).",
        schema={"type": "string", "pattern": "^[0-9]+$"},
    ),
    "webhook-signature": _header(
        '`v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<raw body>">` keyed with the '
        "receiver's secret (`whsec_...`); two, space-separated, during a rotation. Absent when the "
        "secret's owner (the job's submitter, the subscription) was deleted.",
        required=False,
    ),
    "Idempotency-Key": _header("The same as `webhook-id`."),
    "X-SAS-Delivery": _header(
        "What the message is: `callback` or `webhook`.",
        schema={"type": "string", "enum": ["callback", "webhook"]},
    ),
    "X-SAS-Signature": _header(
        "Legacy: `sha256=<hex HMAC-SHA256 of the body with SAS_CALLBACK_SECRET>`, one key shared "
        "by every receiver. Sent while SAS_LEGACY_SIGNATURE is on (this release); verify "
        "`webhook-signature` instead.",
        required=False,
    ),
}

_DELIVERY_RESPONSES: dict[str, Any] = {
    "2XX": {"description": "Delivered: not sent again. The body is not read."},
    "default": {
        "description": (
            "Anything else (another status, no answer within SAS_DELIVERY_TIMEOUT, a refused "
            "connection) is tried again with exponential backoff (from SAS_DELIVERY_RETRY_SECONDS, "
            "at most an hour apart), 20 tries in all; then the message is kept as failed, "
            "visible on the job and in the admin, where an operator may send it again."
        )
    },
}


def _parameters(headers: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": name, "in": "header", **spec} for name, spec in headers.items()]


def _json_body(schema_name: str, description: str) -> dict[str, Any]:
    return {
        "required": True,
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}},
    }


COMPLETION_CALLBACK = OpenApiWebhook(
    name="jobSettled",
    decorator={
        "post": {
            "operationId": "webhook_job_settled",
            "tags": ["webhooks"],
            "summary": "A job settled (sent to the job's callback_url)",
            "description": (
                "Sent once the job succeeds, fails, is compensated or is cancelled, at least once: "
                "a receiver may get a message twice and de-duplicates on `webhook-id`. Signed with "
                "the submitter's secret (`GET /api/v1/callback-secret/`). Redirects are not followed."
            ),
            "parameters": _parameters(DELIVERY_HEADERS),
            "requestBody": _json_body("CompletionCallback", "The job's summary."),
            "responses": copy.deepcopy(_DELIVERY_RESPONSES),
        }
    },
)

ALERT_WEBHOOK = OpenApiWebhook(
    name="alert",
    decorator={
        "post": {
            "operationId": "webhook_alert",
            "tags": ["webhooks"],
            "summary": "An alert (sent to an alert subscription's webhook_url)",
            "description": (
                "Sent for each alert kind the subscription wants (`kinds`), once per subscription "
                "and subject, at least once. Signed with the subscription's secret (the answer to "
                "`POST /api/v1/alerts/` holds it). A subscription with an `email` gets the same "
                "body as the text of a mail."
            ),
            "parameters": _parameters(DELIVERY_HEADERS),
            "requestBody": _json_body("AlertWebhook", "The alert: its kind and what it is about."),
            "responses": copy.deepcopy(_DELIVERY_RESPONSES),
        }
    },
)

#: Headers of a call to an HTTP remote (agents.http.call_http).
REMOTE_CALL_HEADERS: dict[str, dict[str, Any]] = {
    "Idempotency-Key": _header("The operation ID: the same on every attempt of the step."),
    "X-SAS-Attempt": _header(
        "This attempt's number, from 1.", schema={"type": "string", "pattern": "^[1-9][0-9]*$"}
    ),
    "X-SAS-Callback-URL": _header(
        "Where to POST the result later, after answering 202 (and `<this URL>heartbeat/` while "
        "working). Sent with every call when SAS_PUBLIC_URL is set; not with a status query.",
        required=False,
        schema={"type": "string", "format": "uri"},
    ),
    "Accept": _header("`application/json`.", schema={"type": "string", "enum": ["application/json"]}),
}

_ENDPOINT_HEADER_NOTE = (
    " The endpoint's secret header, when the pool's endpoint has one (`secret_header_name`, "
    "`secret_header_value`), is sent too: check it."
)

_OUTCOMES = (
    "No redirect is followed; the call ends by the attempt's deadline (the policy's "
    "`timeout_seconds`, at most what is left of the job's), and an answer larger than "
    "SAS_MAX_RESPONSE_BYTES is a transient failure. No answer before the deadline, or a connection "
    "lost after sending, is `no_answer`: it may have happened, so the next attempt (or the status "
    "query) carries the same operation ID. What is retried, and how, is the step's policy's."
)

REMOTE_CALL = OpenApiWebhook(
    name="remoteCall",
    decorator={
        "post": {
            "operationId": "remote_call",
            "tags": ["remote contract"],
            "summary": "A step's call, as an HTTP remote receives it",
            "description": (
                "POSTed by an agent to `<endpoint URL><step path>` (or `<compensation path>` for "
                "the undo, whose body names the operation it `compensates`), one attempt at a "
                "time." + _ENDPOINT_HEADER_NOTE + " " + _OUTCOMES
            ),
            "parameters": _parameters(REMOTE_CALL_HEADERS),
            "requestBody": _json_body("RemoteCall", "The call."),
            "responses": {
                "200": {
                    "description": (
                        "Done: the body (any JSON; not JSON is recorded as null) is the step's "
                        "output. Any 2xx other than 202 means the same."
                    ),
                    "content": {"application/json": {"schema": copy.deepcopy(_ANY_JSON)}},
                },
                "202": {
                    "description": (
                        "Accepted: the remote reports the result later, by POSTing it to "
                        "`X-SAS-Callback-URL` (see this operation's callbacks). The attempt stays "
                        "in flight; its deadline still applies unless heartbeats move it."
                    )
                },
                "3XX": {"description": "Not followed: a business failure."},
                "408": {"description": "A transient failure (retried by the policy's default)."},
                "429": {"description": "A transient failure (retried by the policy's default)."},
                "4XX": {
                    "description": (
                        "Any other 4xx: a business failure, the remote's refusal (not retried by "
                        "default; the policy decides: compensate, fail or hold)."
                    )
                },
                "5XX": {"description": "A transient failure (retried by the policy's default)."},
            },
            # Filled in by `complete_webhooks` from the service's own callback operations.
            "callbacks": {},
        }
    },
)

REMOTE_STATUS_QUERY = OpenApiWebhook(
    name="remoteStatusQuery",
    decorator={
        "get": {
            "operationId": "remote_status_query",
            "tags": ["remote contract"],
            "summary": "Did an operation happen? (the step's status_path)",
            "description": (
                "Before retrying a call that got no answer (the policy's `reconcile_before_retry`), "
                "the agent asks `<endpoint URL><status_path>`, `{operation_id}` replaced by the "
                "operation ID (URL-encoded). No body, no callback URL." + _ENDPOINT_HEADER_NOTE
            ),
            "parameters": _parameters(
                {name: spec for name, spec in REMOTE_CALL_HEADERS.items() if name != "X-SAS-Callback-URL"}
            ),
            "responses": {
                "200": {
                    "description": (
                        "It happened: the body (any JSON) is the step's output; nothing is called again."
                    ),
                    "content": {"application/json": {"schema": copy.deepcopy(_ANY_JSON)}},
                },
                "404": {"description": "It never happened: the step may be called again safely."},
                "default": {"description": "Anything else: a transient failure; asked again later."},
            },
        }
    },
)

#: The schemas the webhooks name, by component name.
WEBHOOK_SCHEMAS: dict[str, dict[str, Any]] = {
    "CompletionCallback": COMPLETION_CALLBACK_SCHEMA,
    "AlertWebhook": ALERT_WEBHOOK_SCHEMA,
    "RemoteCall": REMOTE_CALL_SCHEMA,
}

#: The service's own operations a remote that answered 202 calls later, by the callback's name
#: in the remote call (the URL is the one the call carried).
_REMOTE_CALLBACKS = {
    "result": ("attempts_callback", "{$request.header.X-SAS-Callback-URL}"),
    "heartbeat": ("attempts_heartbeat", "{$request.header.X-SAS-Callback-URL}heartbeat/"),
}


def complete_webhooks(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Postprocessing hook: the webhooks' schemas as components, and the remote call's callbacks,
    copied from the callback endpoints as the views declare them (so they cannot differ)."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in WEBHOOK_SCHEMAS.items():
        schemas[name] = copy.deepcopy(schema)
    call = result.get("webhooks", {}).get("remoteCall", {}).get("post")
    if call is None:
        return result
    by_id = {operation.get("operationId"): operation for _p, _m, operation in _operations(result)}
    for name, (operation_id, expression) in _REMOTE_CALLBACKS.items():
        operation = by_id.get(operation_id)
        if operation is None:
            raise RuntimeError(f"the remote call's {name} callback names {operation_id!r}, no operation")
        callback = {
            key: copy.deepcopy(value)
            for key, value in operation.items()
            if key in ("summary", "description", "requestBody", "responses")
        }
        call["callbacks"][name] = {expression: {"post": callback}}
    return result
