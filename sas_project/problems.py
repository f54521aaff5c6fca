"""The API's errors as RFC 9457 problem details (`problem`, the one place that shapes them), and
their types: one per `code`, each with a page of its own.

Every error answer's `type` is `/problems/<code>/` (a URI reference, resolved against the
request's URL), and that page, served by the service itself with no sign-in, says what the
problem means and what to do about it; `/problems/` lists them all. The table below is the one
list of the codes the API answers with: sas_project.api writes the `type` from it, and
tests/api/test_problems.py holds every code the service's errors and DRF's carry to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views import defaults
from django.views.decorators.http import require_GET
from rest_framework.response import Response

from sas_project.errors import SasError

#: Where the problem pages are (the `type` of an error with code c is PREFIX + c + "/").
PREFIX = "/problems/"


@dataclass(frozen=True)
class ProblemType:
    status: int
    title: str
    means: str
    to_do: str


PROBLEM_TYPES: dict[str, ProblemType] = {
    "invalid": ProblemType(
        400,
        "The request is not valid",
        "A field is missing, has the wrong type, is out of its range, or names something that does "
        "not exist (a workflow, a pool, a policy); or a job's input breaks its workflow's input "
        "contract. Nothing was done.",
        "Read `errors`: each entry names the field (`field`) and where it is in your request body "
        "(`pointer`, a JSON pointer as a URI fragment, e.g. `#/jobs/2/input/amount`); an input "
        "contract's entries also say where in the input (`input_pointer`). Fix them and send again.",
    ),
    "parse_error": ProblemType(
        400,
        "The body is not JSON the service can store",
        "The body is not valid JSON, not valid UTF-8, nested too deeply, or holds a value no "
        "database column can keep (a NUL character, an unpaired surrogate, a number that is not "
        "finite). Nothing was done.",
        "Send a JSON body with `Content-Type: application/json`.",
    ),
    "not_authenticated": ProblemType(
        401,
        "Sign in first",
        "The request carries no credentials.",
        "Send `Authorization: Token <your token>` (tokens: /accounts/tokens/ or `sas token create`).",
    ),
    "authentication_failed": ProblemType(
        401,
        "The credentials are not valid",
        "The token is unknown, revoked or expired, or the user is inactive.",
        "Make a new token and send it as `Authorization: Token <token>`.",
    ),
    "outbound_refused": ProblemType(
        400,
        "The service may not reach that address",
        "A URL you gave (an endpoint, a callback, a webhook) points at a loopback, private, "
        "link-local or metadata address, or at a host the allow-lists do not name. Nothing was "
        "saved.",
        "Use a public address, or ask an administrator to name the host in the allow-list of its "
        "kind (SAS_AGENT_ALLOWED_HOSTS, SAS_OUTBOUND_INTERNAL_HOSTS, SAS_CALLBACK_...).",
    ),
    "invalid_token": ProblemType(
        403,
        "The callback token is not valid",
        "A remote reported with a callback URL whose token was forged, altered or names no step "
        "of this service.",
        "Use the callback URL exactly as the call carried it (`X-SAS-Callback-URL`).",
    ),
    "permission_denied": ProblemType(
        403,
        "Not allowed for this user",
        "The user is signed in but its groups do not allow this action (submitters submit and read "
        "their own jobs, operators act on any job, administrators change definitions).",
        "Ask an administrator for the group the action needs.",
    ),
    "not_found": ProblemType(
        404,
        "No such resource",
        "Nothing answers at this URL, or the resource (a job, a workflow, a step...) does not exist "
        "or is not yours to see.",
        "Check the id or the name; a submitter sees only the jobs it submitted.",
    ),
    "method_not_allowed": ProblemType(
        405,
        "This URL does not take this method",
        "The resource exists but does not answer this HTTP method.",
        "See `Allow` in the answer, or the API's documentation at /api/docs/.",
    ),
    "not_acceptable": ProblemType(
        406,
        "No answer in the format asked",
        "The `Accept` header names no format the API answers with.",
        "Accept `application/json`.",
    ),
    "not_allowed": ProblemType(
        409,
        "Not allowed in the resource's state",
        "The action does not apply to the job or step as it is now (a settled job cannot be "
        "cancelled, a running step cannot be resolved...). Nothing was done.",
        "Read the resource again; `detail` says which state refused the action.",
    ),
    "stale": ProblemType(
        409,
        "Somebody else changed it first",
        "Another request changed the resource between your read and your write. Nothing was done.",
        "Read the resource again and decide again.",
    ),
    "invalid_transition": ProblemType(
        409,
        "A move the state machine does not allow",
        "The resource cannot move from its status to the one the action needs.",
        "Read the resource again: its status says what it can do now.",
    ),
    "limit_reached": ProblemType(
        409,
        "A limit of the service is reached",
        "The action would pass a limit (items of a fan-out, jobs descending from one submission...).",
        "`detail` names the limit and its setting; split the work, or ask an administrator.",
    ),
    "conflict": ProblemType(
        409,
        "Changed at the same moment",
        "Two requests wrote the same thing at the same moment; yours lost. Nothing was done.",
        "Send yours again.",
    ),
    "already_recorded": ProblemType(
        409,
        "The result is already in",
        "A remote reported a result for an attempt whose outcome is recorded: a result is recorded once.",
        "Nothing to do: the first result counts.",
    ),
    "concurrency_limit": ProblemType(
        409,
        "The workflow's concurrency key is busy",
        "The workflow allows a limited number of jobs per key at once, with `on_limit: "
        "cancel_newest`: this submission would pass it. `running` lists the jobs holding the key.",
        "Wait for one of them to settle, or submit with another key.",
    ),
    "archived": ProblemType(
        410,
        "Moved to the archive",
        "The job is older than the history's retention and was archived.",
        "Restore it with `manage.py history_restore` if you need it back.",
    ),
    "token_expired": ProblemType(
        410,
        "The callback token has expired",
        "A remote reported a result or a heartbeat with a callback URL whose token is past its time.",
        "Nothing to send any more: the attempt was decided without it.",
    ),
    "attempt_given_up": ProblemType(
        410,
        "The attempt was given up",
        "A remote reported on an attempt the service no longer waits for (it timed out, or its job stopped).",
        "Stop working on it: the operation ID says which one.",
    ),
    "too_large": ProblemType(
        413,
        "The body is too large",
        "The request body is larger than the service takes (DATA_UPLOAD_MAX_MEMORY_SIZE).",
        "Send less: submit a batch in several requests, keep large documents elsewhere.",
    ),
    "unsupported_media_type": ProblemType(
        415,
        "Not JSON",
        "The body's `Content-Type` is not one the API reads.",
        "Send `Content-Type: application/json`.",
    ),
    "idempotency_conflict": ProblemType(
        422,
        "The idempotency key was used for another request",
        "This `Idempotency-Key` answered a different request (another body or another path) "
        "before. Nothing was done.",
        "Use a new key for a new request; the same key only to repeat the same request.",
    ),
    "throttled": ProblemType(
        429,
        "Too many requests",
        "The user's (or the address's) request rate is over its limit.",
        "Wait for `Retry-After` seconds; `RateLimit-*` headers say how much is left.",
    ),
    "error": ProblemType(
        500,
        "Something failed in the service",
        "The service could not answer; the failure is logged with the request's id.",
        "Send again later; if it persists, tell the operators the time and the `instance`.",
    ),
}


def type_uri(code: str) -> str:
    """The `type` of a problem with `code`: its page (the generic one for a code not listed)."""
    return f"{PREFIX}{code if code in PROBLEM_TYPES else 'error'}/"


@require_GET
def problem_index(request: HttpRequest) -> HttpResponse:
    """Every problem type, by HTTP status."""
    rows = sorted(PROBLEM_TYPES.items(), key=lambda item: (item[1].status, item[0]))
    return render(request, "problems/index.html", {"rows": rows})


@require_GET
def problem_page(request: HttpRequest, code: str) -> HttpResponse:
    """What one problem type means and what to do about it."""
    problem = PROBLEM_TYPES.get(code)
    if problem is None:
        raise Http404("no such problem type")
    return render(request, "problems/problem.html", {"code": code, "problem": problem, "prefix": PREFIX})


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: under /api/, a problem detail with the members of every other error (its
    cause is logged, never shown); elsewhere, Django's page."""
    if not request.path.startswith("/api/"):
        return defaults.server_error(request)
    body = {
        "type": type_uri("error"),
        "title": _title(500),
        "status": 500,
        "detail": "The service could not answer; the failure is logged.",
        "instance": request.path,
        "code": "error",
    }
    return JsonResponse(body, status=500, content_type=PROBLEM_JSON)


# --- the answer ----------------------------------------------------------------------------------


#: The media type of every error answer (RFC 9457).
PROBLEM_JSON = "application/problem+json"


def problem(response: Response, request: Any, errors: list[dict[str, Any]]) -> Response:
    """The error body made an RFC 9457 problem detail: `type` (the page of its code,
    sas_project.problems), `title`, `status`,
    `instance` and, for field errors, `errors` (each with a JSON pointer), served as
    `application/problem+json` to a client that takes JSON. The fields v1 clients read (`detail`,
    `code`, `field`, DRF's field entries) are kept, except a field entry named like a member of
    the problem (`status`, `type`...): the member wins, and the field is in `errors`."""
    body = response.data
    code = str(body.get("code") or "error")
    members = {
        "type": type_uri(code),
        "title": _title(response.status_code),
        "status": response.status_code,
        "detail": body.get("detail", ""),
        "instance": getattr(request, "path", "") or "",
    }
    response.data = {**members, **{k: v for k, v in body.items() if k not in members}}
    if errors:
        response.data["errors"] = errors
    else:
        response.data.pop("errors", None)
    renderer = getattr(request, "accepted_renderer", None)
    if renderer is None or getattr(renderer, "format", "json") == "json":
        response.content_type = PROBLEM_JSON
    return response


def sas_field_errors(exc: SasError) -> list[dict[str, Any]]:
    """A service error's `errors`, each `pointer` into the request body: the one field it names,
    or an input contract's own errors (scheduler.contracts: each with its RFC 6901 pointer into
    the input, kept as `input_pointer`, and its `message`, given a `detail` too). A batch item's
    error (`index`) points into `jobs/<index>`."""
    field = exc.detail.get("field")
    path = _field_path(field) if isinstance(field, str) and field else ()
    index = exc.detail.get("index")
    if isinstance(index, int) and path[:1] != ("jobs",):
        path = ("jobs", index, *path)
    listed = exc.detail.get("errors")
    if isinstance(listed, list):
        return [_contract_error(e, path, field) if isinstance(e, dict) else e for e in listed]
    if path:
        return [{"field": field, "pointer": pointer(path), "detail": exc.message, "code": exc.code}]
    return []


def _contract_error(error: dict[str, Any], path: tuple[Any, ...], field: Any) -> dict[str, Any]:
    inside = str(error.get("pointer", ""))
    steps = [p.replace("~1", "/").replace("~0", "~") for p in inside.split("/")[1:]] if inside else []
    return {
        **error,
        "field": field,
        "pointer": pointer((*path, *steps)),
        "input_pointer": inside,
        "detail": error.get("message", ""),
    }


def _field_path(field: str) -> tuple[Any, ...]:
    """A field path as the services name it (`jobs[2].input`, `concurrency.key`) as the steps of a
    JSON pointer: ("jobs", 2, "input"), ("concurrency", "key")."""
    steps: list[Any] = []
    for part in field.split("."):
        name, *indexes = part.replace("]", "").split("[")
        if name:
            steps.append(name)
        steps += [int(i) if i.isdigit() else i for i in indexes]
    return tuple(steps)


def pointer(path: tuple[Any, ...]) -> str:
    return "#/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _title(status_code: int) -> str:
    try:
        return HTTPStatus(status_code).phrase
    except ValueError:
        return "Error"
