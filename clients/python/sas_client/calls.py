"""The API's calls as data, shared by `Client` (sync) and `AsyncClient` (async): each function
here says what one operation sends (method, path, body, headers, whether it may be sent again) and
which generated model reads its answer; the two clients only send it, the one way or the other.

Nothing here does I/O, so the two clients cannot drift apart on what they send.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sas_client.errors import SasApiError, SasError
from sas_client.openapi import models

Json = dict[str, Any]

#: The statuses a job ends in; it changes no more after one of them.
SETTLED = frozenset({"succeeded", "failed", "compensated", "cancelled"})
#: The most jobs the service takes in one batch request by default (SAS_MAX_BATCH_JOBS).
MAX_BATCH = 100
#: The definitions `sas apply` and the `*_definition` methods manage: kind -> the API's collection.
KINDS: dict[str, str] = {
    "workflow": "workflows",
    "pool": "pools",
    "policy": "policies",
    "schedule": "schedules",
}
KIND_MODELS: dict[str, Any] = {
    "workflow": models.Workflow,
    "pool": models.Pool,
    "policy": models.Policy,
    "schedule": models.Schedule,
}
#: The operator actions on a job (POST /api/v1/jobs/<id>/<verb>/, `{"reason"}`).
JOB_ACTIONS = ("cancel", "compensate", "pause", "resume")
#: The actions of POST /api/v1/attention/bulk/.
BULK_ACTIONS = ("retry", "compensate", "cancel")


@dataclass(frozen=True)
class Call:
    """One request to the API. `idempotent` lets a POST without an `Idempotency-Key` be retried
    (a batch whose every item has a key); `model` is the generated class that reads the answer
    (a list's items for a list), for the clients that answer with typed models."""

    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    idempotent: bool = False
    model: Any = None


def new_key() -> str:
    """A fresh idempotency key."""
    return str(uuid.uuid4())


def _present(body: Mapping[str, Any]) -> Json:
    return {k: v for k, v in body.items() if v is not None}


def _keyed(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key or new_key()}


# --- jobs ------------------------------------------------------------------------------------------


def submit(
    workflow: str,
    input: Mapping[str, Any] | None,
    *,
    idempotency_key: str | None,
    business_key: str | None,
    priority: int | None,
    callback_url: str | None,
) -> Call:
    body: Json = {"workflow": workflow, "input": dict(input or {})}
    body.update(_present({"business_key": business_key, "priority": priority, "callback_url": callback_url}))
    return Call("POST", "/api/v1/jobs/", body, headers=_keyed(idempotency_key), model=models.Job)


def batch_chunk(chunk: list[Json]) -> Call:
    # Every item has a key, so the request may be sent again: it finds its jobs.
    return Call(
        "POST", "/api/v1/jobs/batch/", {"jobs": chunk}, idempotent=True, model=models.JobBatchResponse
    )


def get(job_id: str) -> Call:
    return Call("GET", f"/api/v1/jobs/{job_id}/", model=models.Job)


def jobs(params: Mapping[str, Any]) -> Call:
    return Call("GET", "/api/v1/jobs/", params=params, model=models.JobSummary)


def events(job_id: str, page_size: int | None) -> Call:
    return Call("GET", f"/api/v1/jobs/{job_id}/events/", params={"page_size": page_size}, model=models.Event)


def signals(job_id: str) -> Call:
    return Call("GET", f"/api/v1/jobs/{job_id}/signals/", model=models.Signal)


def signal(job_id: str, name: str, payload: Any, idempotency_key: str | None) -> Call:
    return Call(
        "POST",
        f"/api/v1/jobs/{job_id}/signals/",
        {"name": name, "payload": payload},
        headers=_keyed(idempotency_key),
        model=models.Signal,
    )


def rerun(
    job_id: str,
    *,
    from_step: str,
    input: Mapping[str, Any] | None,
    reason: str | None,
    idempotency_key: str | None,
) -> Call:
    return Call(
        "POST",
        f"/api/v1/jobs/{job_id}/rerun/",
        _present({"from_step": from_step, "input": input, "reason": reason}),
        headers=_keyed(idempotency_key),
        model=models.Job,
    )


def job_action(verb: str, job_id: str, reason: str | None) -> Call:
    """cancel, compensate, pause or resume (operators). Sent once: not retried."""
    if verb not in JOB_ACTIONS:
        raise ValueError(f"not a job action: {verb}")
    return Call("POST", f"/api/v1/jobs/{job_id}/{verb}/", _present({"reason": reason}), model=models.Job)


def decide(job_id: str, step: str, decision: str, comment: str | None) -> Call:
    return Call(
        "POST",
        f"/api/v1/jobs/{job_id}/steps/{step}/{decision}/",
        _present({"comment": comment}),
        model=models.Step,
    )


# --- events and signals by business key -----------------------------------------------------------


def signal_by_key(
    business_key: str, name: str, payload: Any, *, workflow: str | None, idempotency_key: str | None
) -> Call:
    """A signal to the live jobs with a business key, kept for one to come when none is live."""
    body = {
        "business_key": business_key,
        "name": name,
        "payload": payload,
        **_present({"workflow": workflow}),
    }
    return Call(
        "POST", "/api/v1/signals/", body, headers=_keyed(idempotency_key), model=models.KeyedSignalAnswer
    )


def post_event(type: str, id: str, source: str, data: Any) -> Call:
    """An event: its (source, id) is its own idempotency key, so it may be sent again."""
    body = {"type": type, "id": id, "source": source, "data": data}
    return Call("POST", "/api/v1/events/", body, idempotent=True, model=models.InboundEventAnswer)


def replay_event(event: int, *, reason: str | None, idempotency_key: str | None) -> Call:
    """An operator's replay of a received event, keyed so that a retry replays it once."""
    return Call(
        "POST",
        f"/api/v1/events/{event}/replay/",
        _present({"reason": reason}),
        headers=_keyed(idempotency_key),
        model=models.EventReplayAnswer,
    )


# --- steps and the operator's lists ----------------------------------------------------------------


def retry_step(
    step_id: int, *, reason: str | None, pool: str | None, input: Mapping[str, Any] | None
) -> Call:
    return Call(
        "POST",
        f"/api/v1/steps/{step_id}/retry/",
        _present({"reason": reason, "pool": pool, "input": input}),
        model=models.StepActionResult,
    )


def resolve_step(step_id: int, *, output: Mapping[str, Any] | None, reason: str | None) -> Call:
    body = {"output": None if output is None else dict(output), **_present({"reason": reason})}
    return Call("POST", f"/api/v1/steps/{step_id}/resolve/", body, model=models.StepActionResult)


def attention(filters: Mapping[str, Any]) -> Call:
    return Call("GET", "/api/v1/attention/", params=filters, model=models.AttentionItem)


def bulk(
    action: str, step_ids: Iterable[int], *, reason: str | None, dry_run: bool, idempotency_key: str | None
) -> Call:
    """A bulk action; a real one is keyed (the service answers a replay with the first answer),
    so it may be sent again. A dry run changes nothing and is a read in all but its method."""
    if action not in BULK_ACTIONS:
        raise ValueError(f"not a bulk action: {action}")
    body = {"action": action, "step_ids": list(step_ids), "dry_run": dry_run, **_present({"reason": reason})}
    return Call(
        "POST",
        "/api/v1/attention/bulk/",
        body,
        headers={} if dry_run else _keyed(idempotency_key),
        idempotent=dry_run,
        model=models.BulkResult,
    )


def supervisor() -> Call:
    return Call("GET", "/api/v1/supervisor/", model=models.SupervisorStatus)


# --- definitions: workflows, pools, policies, schedules ------------------------------------------


def _collection(kind: str) -> str:
    try:
        return f"/api/v1/{KINDS[kind]}/"
    except KeyError:
        raise SasError(f"unknown kind {kind!r}: one of {', '.join(KINDS)}") from None


def definitions(kind: str) -> Call:
    return Call("GET", _collection(kind), model=KIND_MODELS[kind])


def definition(kind: str, name: str) -> Call:
    return Call("GET", f"{_collection(kind)}{name}/", model=KIND_MODELS[kind])


def create_definition(kind: str, body: Mapping[str, Any]) -> Call:
    """Sent once: a second POST of the same name is a 409, not a duplicate, so it is safe to
    send again by hand, but the client does not guess."""
    return Call("POST", _collection(kind), dict(body), model=KIND_MODELS[kind])


def change_definition(kind: str, name: str, body: Mapping[str, Any], *, replace: bool) -> Call:
    """PUT (`replace`: every field stated, the others reset) or PATCH (the fields given). Sent
    once: a workflow's change makes a new version each time."""
    method = "PUT" if replace else "PATCH"
    return Call(method, f"{_collection(kind)}{name}/", dict(body), model=KIND_MODELS[kind])


def delete_definition(kind: str, name: str) -> Call:
    return Call("DELETE", f"{_collection(kind)}{name}/", idempotent=True)


def schedule_pause(name: str, paused: bool) -> Call:
    verb = "pause" if paused else "resume"
    return Call("POST", f"/api/v1/schedules/{name}/{verb}/", {}, idempotent=True, model=models.Schedule)


def schedule_backfill(name: str, start: str, end: str) -> Call:
    """Start the fire times in [start, end] (ISO 8601) that made no job. Safe to send again: a
    second backfill of the range starts nothing."""
    return Call(
        "POST",
        f"/api/v1/schedules/{name}/backfill/",
        {"start": start, "end": end},
        idempotent=True,
        model=models.ScheduleBackfillAnswer,
    )


# --- tokens ----------------------------------------------------------------------------------------


def tokens(user: str | None) -> Call:
    return Call("GET", "/api/v1/tokens/", params={"user": user}, model=models.Token)


def create_token(name: str, lifetime_days: float | None) -> Call:
    return Call(
        "POST",
        "/api/v1/tokens/",
        {"name": name, **_present({"lifetime_days": lifetime_days})},
        model=models.TokenCreated,
    )


def revoke_token(token_id: int) -> Call:
    # Idempotent on the service: revoking it again answers it as it is.
    return Call("POST", f"/api/v1/tokens/{token_id}/revoke/", {}, idempotent=True, model=models.Token)


# --- what both clients compute alike ---------------------------------------------------------------


def find_step(job: Json, step: str | int) -> Json:
    """The step of `job` (its JSON, with `steps`) named `step`, or whose id it is (a number, or
    digits): the one addressing of steps. A compensation step is found by its id only, and a
    name shared by several steps (a fan-out's items) is refused naming their ids."""
    steps: list[Json] = job.get("steps") or []
    if isinstance(step, int) or str(step).isdigit():
        found = [s for s in steps if s.get("id") == int(step)]
    else:
        found = [s for s in steps if s.get("name") == step and s.get("kind", "action") == "action"]
    if len(found) == 1:
        return found[0]
    if not found:
        names = ", ".join(sorted({str(s.get("name")) for s in steps})) or "none"
        raise SasError(f"job {job.get('id')} has no step {step!r} (its steps: {names})")
    ids = ", ".join(str(s.get("id")) for s in found)
    raise SasError(f"job {job.get('id')} has several steps {step!r}: name one by its id ({ids})")


@dataclass
class BatchItem:
    """One job of a batch: made (or found again, `created` False) or refused with `error`.

    `idempotency_key` is the key it was sent with: sending the same items again with the same
    keys is safe, whatever happened to the first request."""

    index: int
    idempotency_key: str
    id: str | None = None
    created: bool | None = None
    url: str | None = None
    error: SasApiError | None = None
    #: In a refused chunk: whether the service named this item as the one at fault.
    at_fault: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.id is not None


@dataclass
class BatchResult:
    """Every item of a batch in the order given. The service takes each request (chunk) whole or
    not at all: every item of a refused chunk carries its chunk's error, and the one the service
    named is `at_fault`."""

    items: list[BatchItem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(item.ok for item in self.items)

    @property
    def failed(self) -> list[BatchItem]:
        return [item for item in self.items if not item.ok]


#: `progress(done, total)` after each chunk of a batch: items answered so far, of how many.
BatchProgress = Callable[[int, int], None]


class Batch:
    """A batch cut in chunks, and what became of each item: `chunks()` to send, then `record` or
    `refuse` for each chunk's answer."""

    def __init__(self, jobs: Iterable[Mapping[str, Any]], chunk_size: int) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        self.chunk_size = chunk_size
        self.items = [{**job, "idempotency_key": job.get("idempotency_key") or new_key()} for job in jobs]
        self.result = BatchResult(
            items=[
                BatchItem(index=n, idempotency_key=item["idempotency_key"])
                for n, item in enumerate(self.items)
            ]
        )

    def chunks(self) -> list[tuple[int, list[Json]]]:
        size = self.chunk_size
        return [(start, self.items[start : start + size]) for start in range(0, len(self.items), size)]

    def record(self, start: int, answer: Json) -> None:
        for made in answer["jobs"]:
            item = self.result.items[start + made["index"]]
            item.id, item.created, item.url = made["id"], made["created"], made["url"]

    def refuse(self, start: int, size: int, error: SasApiError) -> None:
        """Every item of a refused chunk carries the error; the service names the item at fault
        by its `index` in the chunk (`"detail": "jobs[2]: ..."`)."""
        at_fault = error.body.get("index") if isinstance(error.body, dict) else None
        for n, item in enumerate(self.result.items[start : start + size]):
            item.error = error
            item.at_fault = n == at_fault


class Polling:
    """The pauses of a wait: from `interval`, growing by half each poll up to `max_interval`, cut
    to what is left of `timeout` (None: no limit)."""

    def __init__(
        self,
        timeout: float | None,
        interval: float,
        max_interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock
        self.deadline = None if timeout is None else clock() + timeout
        self.interval, self.max_interval = interval, max_interval

    def pause(self) -> float | None:
        """The next pause, or None when the time has run out."""
        now = self.clock()
        if self.deadline is not None and now >= self.deadline:
            return None
        pause = self.interval if self.deadline is None else min(self.interval, max(0.0, self.deadline - now))
        self.interval = min(self.max_interval, self.interval * 1.5)
        return pause
