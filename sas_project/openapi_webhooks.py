"""What the service sends, as the OpenAPI schema's webhooks (OAS 3.1 `webhooks`): the job's
completion callback, the alert webhook, and the remote contract: the call an HTTP remote receives
(with the OAS `callbacks` by which a remote that answered 202 reports its result and heartbeats
later) and the status query.

Their bodies are the JSON Schemas below; the tests validate what the service's own code builds
(scheduler.outbox, supervisor.alerts, the claim's payload as agents.http sends it) against them.
The queue agent's messages are in docs/asyncapi.yaml. sas_project.openapi names these in
SPECTACULAR_SETTINGS with the schema's other additions. Nothing here changes what the service
does: it only describes it.
"""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.utils import OpenApiWebhook

_METHODS = ("get", "put", "post", "patch", "delete", "head", "options", "trace")


def operations(result: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every operation of the schema `result`: (path, method, operation)."""
    return [
        (path, method, operation)
        for path, item in result.get("paths", {}).items()
        for method, operation in item.items()
        if method in _METHODS
    ]


_ANY_JSON: dict[str, Any] = {"description": "Any JSON value."}
_UUID: dict[str, Any] = {"type": "string", "format": "uuid"}
_DATE_TIME: dict[str, Any] = {"type": "string", "format": "date-time"}
_DATE_TIME_OR_NULL: dict[str, Any] = {"type": ["string", "null"], "format": "date-time"}


def _or_null(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """`schema`, or null, with its description."""
    return {**schema, "type": [schema["type"], "null"], "description": description}


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
            [
                "step_needs_attention",
                "job_failed",
                "job_compensated",
                "approval_requested",
                "approval_reminder",
                "wait_escalated",
            ],
            "A job's event: a step held for an operator, a job failed or compensated, an approval asked "
            "for, a wait with no decision reminded or escalated.",
            {
                "job_id": _UUID,
                "step_id": _or_null({"type": "integer"}, "The step, when the event names one."),
                "attempt": _or_null({"type": "integer"}, "The attempt, when the event names one."),
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
                "open_until": _DATE_TIME,
            },
        ),
        _alert(
            ["supervisor_stale"],
            "The supervisor's last scan is older than three intervals.",
            {
                "holder": {"type": "string", "description": "The cluster that holds the supervisor's lease."},
                "last_scan_at": _DATE_TIME,
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
                "job_id": _or_null(_UUID, "The job, when it names one."),
                "step_id": _or_null({"type": "integer"}, "The step, when it names one."),
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
                "retry_at": _DATE_TIME,
            },
        ),
        _alert(
            ["canary_unremediated"],
            "The canary job (which succeeds only through the supervisor's retry) did not succeed in "
            "its expected time (once per run of failures).",
            {
                "job_id": _UUID,
                "status": {"type": "string", "description": "The canary job's status."},
                "submitted_at": _DATE_TIME,
                "age_seconds": {"type": "number", "minimum": 0},
                "expected_seconds": {"type": "number", "minimum": 0},
            },
        ),
        _alert(
            ["signal_expired"],
            "A signal sent by business key reached no live job and was kept for one to come; none with "
            "its key started within SAS_SIGNAL_LOOKBACK_SECONDS (once per signal).",
            {
                "keyed_signal": {"type": "integer", "description": "The kept signal's id."},
                "business_key": {"type": "string"},
                "workflow": {"type": "string", "description": "The workflow it was for ('' for any)."},
                "name": {"type": "string", "description": "The signal's name."},
                "sender": _or_null({"type": "string"}, "Who sent it."),
                "sent_at": _DATE_TIME,
                "expired_at": _DATE_TIME,
            },
        ),
        _alert(
            ["job_at_risk"],
            "A live job is likely to miss its workflow's sla_seconds (once per job, with its event "
            "job_at_risk): by the clock (not finished after warn_fraction of it) or by the projection "
            "of its remaining steps at their recent measured durations.",
            {
                "job_id": _UUID,
                "workflow": {"type": "string"},
                "rule": {
                    "type": "string",
                    "enum": ["clock", "projection"],
                    "description": "Which rule flagged it.",
                },
                "sla_seconds": {"type": "number", "exclusiveMinimum": 0},
                "warn_fraction": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                "created_at": _DATE_TIME,
                "warn_at": {**_DATE_TIME, "description": "When the clock rule flags it."},
                "due_at": {**_DATE_TIME, "description": "Its submission plus sla_seconds."},
                "projected_finish": {
                    **_DATE_TIME,
                    "description": "When its remaining steps end if each takes its measured duration.",
                },
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
        "job_id": _UUID,
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
        "by every receiver, no timestamp. Deprecated: sent only when SAS_LEGACY_SIGNATURE is on; "
        "verify `webhook-signature` instead.",
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


def _json_answer(description: str) -> dict[str, Any]:
    """A remote's answer whose body, any JSON, is the step's output."""
    return {"description": description, "content": {"application/json": {"schema": copy.deepcopy(_ANY_JSON)}}}


def _json_body(schema_name: str, description: str) -> dict[str, Any]:
    return {
        "required": True,
        "description": description,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema_name}"}}},
    }


def _delivery_webhook(
    name: str, operation_id: str, *, summary: str, description: str, schema: str, body: str
) -> OpenApiWebhook:
    """A message of the outbox (scheduler.outbox), as its receiver gets it: POSTed with the
    delivery headers, its body the component `schema`, answered as any delivery is."""
    return OpenApiWebhook(
        name=name,
        decorator={
            "post": {
                "operationId": operation_id,
                "tags": ["webhooks"],
                "summary": summary,
                "description": description,
                "parameters": _parameters(DELIVERY_HEADERS),
                "requestBody": _json_body(schema, body),
                "responses": copy.deepcopy(_DELIVERY_RESPONSES),
            }
        },
    )


COMPLETION_CALLBACK = _delivery_webhook(
    "jobSettled",
    "webhook_job_settled",
    summary="A job settled (sent to the job's callback_url)",
    description=(
        "Sent once the job succeeds, fails, is compensated or is cancelled, at least once: "
        "a receiver may get a message twice and de-duplicates on `webhook-id`. Signed with "
        "the submitter's secret (`GET /api/v1/callback-secret/`). Redirects are not followed."
    ),
    schema="CompletionCallback",
    body="The job's summary.",
)

ALERT_WEBHOOK = _delivery_webhook(
    "alert",
    "webhook_alert",
    summary="An alert (sent to an alert subscription's webhook_url)",
    description=(
        "Sent for each alert kind the subscription wants (`kinds`), once per subscription "
        "and subject, at least once. Signed with the subscription's secret (the answer to "
        "`POST /api/v1/alerts/` holds it). A subscription with an `email` gets the same "
        "body as the text of a mail."
    ),
    schema="AlertWebhook",
    body="The alert: its kind and what it is about.",
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


def _remote_webhook(
    name: str, method: str, operation_id: str, *, summary: str, description: str, **operation: Any
) -> OpenApiWebhook:
    """A request of the remote contract, as an HTTP remote receives it: `operation` holds the
    rest of the operation (parameters, body, responses, callbacks)."""
    return OpenApiWebhook(
        name=name,
        decorator={
            method: {
                "operationId": operation_id,
                "tags": ["remote contract"],
                "summary": summary,
                "description": description,
                **operation,
            }
        },
    )


REMOTE_CALL = _remote_webhook(
    "remoteCall",
    "post",
    "remote_call",
    summary="A step's call, as an HTTP remote receives it",
    description=(
        "POSTed by an agent to `<endpoint URL><step path>` (or `<compensation path>` for "
        "the undo, whose body names the operation it `compensates`), one attempt at a "
        "time." + _ENDPOINT_HEADER_NOTE + " " + _OUTCOMES
    ),
    parameters=_parameters(REMOTE_CALL_HEADERS),
    requestBody=_json_body("RemoteCall", "The call."),
    responses={
        "200": _json_answer(
            "Done: the body (any JSON; not JSON is recorded as null) is the step's "
            "output. Any 2xx other than 202 means the same."
        ),
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
    callbacks={},
)

REMOTE_STATUS_QUERY = _remote_webhook(
    "remoteStatusQuery",
    "get",
    "remote_status_query",
    summary="Did an operation happen? (the step's status_path)",
    description=(
        "Before retrying a call that got no answer (the policy's `reconcile_before_retry`), "
        "the agent asks `<endpoint URL><status_path>`, `{operation_id}` replaced by the "
        "operation ID (URL-encoded). No body, no callback URL." + _ENDPOINT_HEADER_NOTE
    ),
    parameters=_parameters(
        {name: spec for name, spec in REMOTE_CALL_HEADERS.items() if name != "X-SAS-Callback-URL"}
    ),
    responses={
        "200": _json_answer(
            "It happened: the body (any JSON) is the step's output; nothing is called again."
        ),
        "404": {"description": "It never happened: the step may be called again safely."},
        "default": {"description": "Anything else: a transient failure; asked again later."},
    },
)

REMOTE_CANCEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": (
        "Stop an operation a call started: its job was cancelled or compensated while the call "
        "may still be running. The same `operation_id` as the call (also the `Idempotency-Key` "
        "header): a repeat is the same cancel."
    ),
    "properties": {
        "type": {"type": "string", "enum": ["cancel"]},
        "job_id": _UUID,
        "step": {"type": "string", "description": "The step's name in its workflow."},
        "operation_id": {"type": "string", "description": "The operation to stop: the call's."},
        "attempt": {
            "type": "integer",
            "minimum": 1,
            "description": "The call's attempt number (X-SAS-Attempt).",
        },
        "index": {"type": "integer", "minimum": 0, "description": "A fan-out item: its position."},
    },
    "required": ["type", "job_id", "step", "operation_id", "attempt"],
}

REMOTE_CANCEL = _remote_webhook(
    "remoteCancel",
    "post",
    "remote_cancel",
    summary="Stop an operation (the step's cancel_path)",
    description=(
        "POSTed to `<the endpoint the call went to><cancel_path>` when the step's job is "
        "cancelled or compensated while its call may still be running (dispatched, no answer "
        "yet, heartbeating); tried again by the step's policy. The cancel asks; it proves "
        "nothing: a step whose call may have had an effect is still compensated." + _ENDPOINT_HEADER_NOTE
    ),
    parameters=_parameters(
        {name: spec for name, spec in REMOTE_CALL_HEADERS.items() if name != "X-SAS-Callback-URL"}
    ),
    requestBody=_json_body("RemoteCancel", "The cancel."),
    responses={
        "2XX": {"description": "Taken (stopped, or nothing left to stop): the cancel ends."},
        "4XX": {"description": "Refused: the cancel ends (408 and 429 are tried again)."},
        "5XX": {"description": "A transient failure: tried again by the step's policy."},
    },
)

#: The schemas the webhooks name, by component name.
WEBHOOK_SCHEMAS: dict[str, dict[str, Any]] = {
    "CompletionCallback": COMPLETION_CALLBACK_SCHEMA,
    "AlertWebhook": ALERT_WEBHOOK_SCHEMA,
    "RemoteCall": REMOTE_CALL_SCHEMA,
    "RemoteCancel": REMOTE_CANCEL_SCHEMA,
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
    by_id = {operation.get("operationId"): operation for _p, _m, operation in operations(result)}
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
