"""`Client`: the service's API for programs, on top of httpx.

What it adds to the generated client (`sas_client.openapi`, reachable as `Client.api` on the same
connection, retries and credentials):

- a submission always carries an `Idempotency-Key` (made per call unless given), so sending it
  again after a timeout or a 5xx finds the job instead of making a second one; batches go through
  `POST /api/v1/jobs/batch/` in chunks, each item with its own key, and come back per item;
- lists are iterators that follow each page's `next` link, whatever the paging (`?page=` or
  `?cursor=`);
- `wait` polls a job until it settles, with a timeout, a growing interval and a progress hook;
- retries (sas_client.transport) for reads and keyed writes only; other writes are sent once;
- one error type, `SasApiError`, read from either of the service's error shapes.

Answers are the API's JSON as dicts, exactly as the service sent them: a field the service adds
is there at once, and nothing here needs regenerating when the schema grows.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sas_client import calls
from sas_client.calls import (
    MAX_BATCH,
    SETTLED,
    BatchItem,
    BatchProgress,
    BatchResult,
    Call,
    Json,
    new_key,
)
from sas_client.errors import SasApiError, SasConnectionError, SasError
from sas_client.openapi import AuthenticatedClient
from sas_client.transport import IDEMPOTENT, RetryHook, RetryPolicy, RetryTransport

__all__ = ["MAX_BATCH", "SETTLED", "BatchItem", "BatchResult", "Client", "Json", "SasWaitTimeout", "new_key"]

#: The environment variables a Client reads when it is given no URL or token.
URL_ENV = "SAS_URL"
TOKEN_ENV = "SAS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
#: A file holding the token, read when neither `token` nor `$SAS_TOKEN` gives one: a secret in a
#: file is out of `ps`, the shell's history and the environment of every child process.
TOKEN_FILE_ENV = "SAS_TOKEN_FILE"  # noqa: S105 - the name of a variable, not a secret
#: What `make run` serves.
DEFAULT_URL = "http://127.0.0.1:8000"


class SasWaitTimeout(SasError):
    """The job had not settled when the wait's time ran out; `job` is the last state seen."""

    def __init__(self, job: Json, timeout: float) -> None:
        super().__init__(f"job {job.get('id')} is still {job.get('status')} after {timeout:g}s")
        self.job = job
        self.timeout = timeout


class SasInsecureURLWarning(UserWarning):
    """The service's URL is plain HTTP to another host than this one: the token travels in clear."""


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(path: str) -> str:
    """The token in the file at `path`: its first line, without surrounding white space."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SasError(f"cannot read the token file {path}: {exc.strerror or exc}") from exc
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


@dataclass(frozen=True)
class Connection:
    """Where and as whom a client talks, resolved once from its arguments and the environment:
    the same for `Client` and `AsyncClient`."""

    url: str
    origin: httpx.URL
    token: str | None
    headers: dict[str, str]

    @classmethod
    def resolve(cls, url: str | None, token: str | None, token_file: str | None) -> Connection:
        """`url`, else `$SAS_URL`, else http://127.0.0.1:8000; `token`, else the first line of
        `token_file`, else `$SAS_TOKEN`, else the first line of the file `$SAS_TOKEN_FILE` names.
        Warns (`SasInsecureURLWarning`) of plain HTTP to another host than this one."""
        base = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        origin = httpx.URL(base)
        if origin.scheme == "http" and not _loopback(origin.host):
            warnings.warn(
                f"{base} is plain HTTP to another host: the token crosses the network in clear (use https://)",
                SasInsecureURLWarning,
                stacklevel=3,
            )
        # What the caller names first (the token, then its file), then the environment's.
        if token is None and token_file:
            token = read_token(token_file)
        if token is None:
            token = os.environ.get(TOKEN_ENV)
        if token is None and os.environ.get(TOKEN_FILE_ENV):
            token = read_token(os.environ[TOKEN_FILE_ENV])
        headers = {"Accept": "application/json, application/problem+json", "User-Agent": "sas-client"}
        if token:
            headers["Authorization"] = f"Token {token}"
        return cls(url=base, origin=origin, token=token, headers=headers)

    def same_origin(self, link: str) -> str:
        """`link` as an absolute URL on the service, refused when it names another origin: the
        client sends its token with every request, and a page's links are data it did not choose."""
        target = self.origin.join(link)
        if (target.scheme, target.host, target.port) != (
            self.origin.scheme,
            self.origin.host,
            self.origin.port,
        ):
            raise SasError(
                f"the service's next page is on another origin ({target.scheme}://{target.host}): "
                "not followed"
            )
        return str(target)

    def send_options(self, call: Call) -> dict[str, Any]:
        """The keyword arguments of httpx's `request` for `call`."""
        query = {k: v for k, v in (call.params or {}).items() if v is not None}
        return {
            "json": call.body,
            "params": query or None,
            "headers": dict(call.headers),
            "extensions": {IDEMPOTENT: True} if call.idempotent else None,
        }

    @staticmethod
    def answer(response: httpx.Response) -> httpx.Response:
        """`response`, or the `SasApiError` its error status says."""
        if response.status_code >= 400:
            raise SasApiError.from_response(response)
        return response

    def unreachable(self, call: Call, exc: httpx.TransportError) -> SasConnectionError:
        return SasConnectionError(f"{call.method} {self.url}{call.path}: {type(exc).__name__}: {exc}")


def read_json(response: httpx.Response) -> Any:
    return json.loads(response.content) if response.content else None


class Client:
    """The service at `url` (default `$SAS_URL`, else http://127.0.0.1:8000) as the user of
    `token`, else the first line of the file `token_file` names, else `$SAS_TOKEN`, else the
    first line of the file `$SAS_TOKEN_FILE` names. Use it as a context manager, or call `close()`.

    A plain `http://` URL to another host than this one warns (`SasInsecureURLWarning`): the
    token would cross the network in clear. Lists follow `next` links on the service's own
    origin only, so a page can never send the token elsewhere."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        token_file: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.connection = Connection.resolve(url, token, token_file)
        self.url, self.origin, self.token = self.connection.url, self.connection.origin, self.connection.token
        self.sleep = sleep
        self.transport = RetryTransport(transport, policy=retry, sleep=sleep, on_retry=on_retry)
        self.http = httpx.Client(
            base_url=self.url, headers=self.connection.headers, timeout=timeout, transport=self.transport
        )
        self._api: AuthenticatedClient | None = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    @property
    def api(self) -> AuthenticatedClient:
        """The generated client (`sas_client.openapi.AuthenticatedClient`) on this client's
        connection: typed models for every operation, with the same retries and credentials.

            from sas_client.openapi.api.jobs import jobs_read
            job = jobs_read.sync(client=client.api, job_id=job_id)

        Its `asyncio` calls belong to `AsyncClient(...).api`: here they raise `SasError` rather
        than go out on a connection without the retries."""
        if self._api is None:
            self._api = AuthenticatedClient(base_url=self.url, token=self.token or "", prefix="Token")
            self._api.set_httpx_client(self.http)
            self._api.set_async_httpx_client(httpx.AsyncClient(base_url=self.url, transport=_SyncOnly()))
        return self._api

    # --- the plumbing --------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool = False,
    ) -> httpx.Response:
        """One call to the API; an error status raises `SasApiError`, no answer
        `SasConnectionError`. `idempotent` lets a POST without a key be retried (a batch whose
        every item has a key)."""
        return self.send(Call(method, path, json_body, params, dict(headers or {}), idempotent))

    def send(self, call: Call) -> httpx.Response:
        """`call` sent (sas_client.calls); its answer, or the error it is."""
        try:
            response = self.http.request(call.method, call.path, **self.connection.send_options(call))
        except httpx.TransportError as exc:
            raise self.connection.unreachable(call, exc) from exc
        return self.connection.answer(response)

    def call(self, call: Call) -> Any:
        """`call`'s answer as JSON (None when empty)."""
        return read_json(self.send(call))

    def _json(self, method: str, path: str, **options: Any) -> Any:
        return read_json(self.request(method, path, **options))

    def pages(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Json]:
        """Every item of a list, page after page: the first page from `path` with `params`, then
        the page each answer's `next` names, until there is none. The paging parameters live in
        `next` (page numbers today, cursors tomorrow), so nothing here depends on them."""
        return self.each(Call("GET", path, params=params))

    def each(self, call: Call) -> Iterator[Json]:
        """Every item of the list `call` reads, following each page's `next` (pages)."""
        page = self.call(call)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.call(Call("GET", self.connection.same_origin(page["next"])))

    # --- jobs ----------------------------------------------------------------------------------

    def submit(
        self,
        workflow: str,
        input: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        business_key: str | None = None,
        priority: int | None = None,
        callback_url: str | None = None,
    ) -> Json:
        """Submit one job; its representation. With a key made for this call unless given, so a
        retried request (timeout, 5xx, 429) finds its job instead of making another: pass your
        own key to make a submission safe across restarts of your program too."""
        job: Json = self.call(
            calls.submit(
                workflow,
                input,
                idempotency_key=idempotency_key,
                business_key=business_key,
                priority=priority,
                callback_url=callback_url,
            )
        )
        return job

    def submit_batch(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = MAX_BATCH,
        progress: BatchProgress | None = None,
    ) -> BatchResult:
        """Submit many jobs through `POST /api/v1/jobs/batch/`, `chunk_size` a request (the
        service's SAS_MAX_BATCH_JOBS at most). Each job is a single submission's body
        (`workflow`, `input`, `business_key`, ...) with its `idempotency_key` (made here when
        absent). A refused chunk does not stop the others: the result says what happened to
        every item. `progress(done, total)` is called after each chunk."""
        batch = calls.Batch(jobs, chunk_size)
        for start, chunk in batch.chunks():
            try:
                batch.record(start, self.call(calls.batch_chunk(chunk)))
            except SasApiError as error:
                batch.refuse(start, len(chunk), error)
            if progress is not None:
                progress(start + len(chunk), len(batch.items))
        return batch.result

    def get(self, job_id: str) -> Json:
        """A job with its steps and their attempts."""
        job: Json = self.call(calls.get(job_id))
        return job

    def jobs(
        self,
        *,
        status: str | None = None,
        workflow: str | None = None,
        business_key: str | None = None,
        idempotency_key: str | None = None,
        created_after: str | None = None,
        created_before: str | None = None,
        page_size: int | None = None,
        **filters: Any,
    ) -> Iterator[Json]:
        """Your jobs (an operator: all), newest first, across every page. `filters` passes other
        query parameters as they are (`**{"input.order": "1001"}`)."""
        params = {
            "status": status,
            "workflow": workflow,
            "business_key": business_key,
            "idempotency_key": idempotency_key,
            "created_after": created_after,
            "created_before": created_before,
            "page_size": page_size,
            **filters,
        }
        return self.each(calls.jobs(params))

    def events(self, job_id: str, *, page_size: int | None = None) -> Iterator[Json]:
        """A job's history, oldest first, across every page."""
        return self.each(calls.events(job_id, page_size))

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        interval: float = 0.5,
        max_interval: float = 5.0,
        progress: Callable[[Json], None] | None = None,
    ) -> Json:
        """Poll the job until it settles (succeeded, failed, compensated or cancelled); that
        state. The interval starts at `interval` and grows by half each poll up to
        `max_interval`; `progress` sees every state read. `SasWaitTimeout` when `timeout`
        seconds pass first (None: no limit). A job needing an operator has not settled."""
        polling = calls.Polling(timeout, interval, max_interval)
        while True:
            job = self.get(job_id)
            if progress is not None:
                progress(job)
            if job["status"] in SETTLED:
                return job
            pause = polling.pause()
            if pause is None:
                raise SasWaitTimeout(job, timeout or 0.0)
            self.sleep(pause)

    def rerun(
        self,
        job_id: str,
        *,
        from_step: str,
        input: Mapping[str, Any] | None = None,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> Json:
        """A new job running `job_id`'s workflow again from `from_step` (that step and every step
        after it run anew; the outputs before it are reused); the new job. Keyed like a
        submission (the service accepts the key from this release on; an older one ignores it)."""
        job: Json = self.call(
            calls.rerun(
                job_id, from_step=from_step, input=input, reason=reason, idempotency_key=idempotency_key
            )
        )
        return job

    def cancel(self, job_id: str, *, reason: str | None = None) -> Json:
        """Cancel a job (operators). Sent once: not retried."""
        return self.job_action("cancel", job_id, reason=reason)

    def job_action(self, verb: str, job_id: str, *, reason: str | None = None) -> Json:
        """`cancel`, `compensate`, `pause` or `resume` a job (operators); the job. Sent once."""
        job: Json = self.call(calls.job_action(verb, job_id, reason))
        return job

    def signal(
        self, job_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> Json:
        """Send the signal `name` to a job; the signal (`consumed_by` names the step that took
        it). Keyed like a submission, so a retry sends it once."""
        answer: Json = self.call(calls.signal(job_id, name, payload, idempotency_key))
        return answer

    def signals(self, job_id: str) -> Iterator[Json]:
        return self.each(calls.signals(job_id))

    def signal_by_key(
        self,
        business_key: str,
        name: str,
        payload: Any = None,
        *,
        workflow: str | None = None,
        idempotency_key: str | None = None,
    ) -> Json:
        """Send the signal `name` to every live job with `business_key` (of `workflow` when
        given); kept for a job to come when none is live (`buffered`). Keyed: a retry sends it once."""
        answer: Json = self.call(
            calls.signal_by_key(
                business_key, name, payload, workflow=workflow, idempotency_key=idempotency_key
            )
        )
        return answer

    def post_event(self, type: str, id: str, source: str, data: Any = None) -> Json:
        """Post an event: what it started and signalled (`duplicate` for a source and id posted
        before, answered with the first answer)."""
        answer: Json = self.call(calls.post_event(type, id, source, data))
        return answer

    def replay_event(
        self, event: int, *, reason: str | None = None, idempotency_key: str | None = None
    ) -> Json:
        """Replay a received event (operators): what the replay started and signalled."""
        answer: Json = self.call(calls.replay_event(event, reason=reason, idempotency_key=idempotency_key))
        return answer

    def approve(self, job_id: str, step: str, *, comment: str | None = None) -> Json:
        """Approve a step waiting for an approval; the step. Sent once: not retried."""
        answer: Json = self.call(calls.decide(job_id, step, "approve", comment))
        return answer

    def reject(self, job_id: str, step: str, *, comment: str | None = None) -> Json:
        """Reject a step waiting for an approval; the step. Sent once: not retried."""
        answer: Json = self.call(calls.decide(job_id, step, "reject", comment))
        return answer

    # --- steps and the operator's lists -----------------------------------------------------------

    def step(self, job_id: str, step: str | int) -> Json:
        """The step of a job named `step` (or whose id it is): `SasError` when none or several."""
        return calls.find_step(self.get(job_id), step)

    def retry_step(
        self,
        step_id: int,
        *,
        reason: str | None = None,
        pool: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> Json:
        """Dispatch a held or failed step again (operators); the step. Sent once: not retried."""
        answer: Json = self.call(calls.retry_step(step_id, reason=reason, pool=pool, input=input))
        return answer

    def resolve_step(
        self, step_id: int, *, output: Mapping[str, Any] | None, reason: str | None = None
    ) -> Json:
        """Complete a step by hand with `output` (operators); the step. Sent once: not retried."""
        answer: Json = self.call(calls.resolve_step(step_id, output=output, reason=reason))
        return answer

    def attention(self, **filters: Any) -> Iterator[Json]:
        """The steps that need an operator (`workflow`, `step`, `pool`, `older_than_minutes`)."""
        return self.each(calls.attention(filters))

    def bulk(
        self,
        action: str,
        step_ids: Iterable[int],
        *,
        reason: str | None = None,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> Json:
        """`retry`, `compensate` or `cancel` many steps (their jobs for the last two); with
        `dry_run`, what would happen to each. Per-item results. Keyed, so it may be sent again."""
        answer: Json = self.call(
            calls.bulk(action, step_ids, reason=reason, dry_run=dry_run, idempotency_key=idempotency_key)
        )
        return answer

    def supervisor(self) -> Json:
        """The lease's holder, the last scan, the remediation debt and every endpoint's health."""
        answer: Json = self.call(calls.supervisor())
        return answer

    # --- definitions ---------------------------------------------------------------------------

    def definitions(self, kind: str) -> Iterator[Json]:
        """Every `kind` (workflow, pool, policy, schedule) the service holds."""
        return self.each(calls.definitions(kind))

    def definition(self, kind: str, name: str) -> Json | None:
        """The `kind` named `name`, None when there is none."""
        try:
            found: Json = self.call(calls.definition(kind, name))
        except SasApiError as error:
            if error.status == 404:
                return None
            raise
        return found

    def create_definition(self, kind: str, body: Mapping[str, Any]) -> Json:
        made: Json = self.call(calls.create_definition(kind, body))
        return made

    def change_definition(
        self, kind: str, name: str, body: Mapping[str, Any], *, replace: bool = False
    ) -> Json:
        """PATCH (the fields in `body`) or, with `replace`, PUT (every field)."""
        changed: Json = self.call(calls.change_definition(kind, name, body, replace=replace))
        return changed

    def delete_definition(self, kind: str, name: str) -> None:
        """Delete it (409 while a job or workflow uses it)."""
        self.call(calls.delete_definition(kind, name))

    def pause_schedule(self, name: str, *, paused: bool = True) -> Json:
        schedule: Json = self.call(calls.schedule_pause(name, paused))
        return schedule

    def backfill_schedule(self, name: str, *, start: str, end: str) -> Json:
        """Start the fire times of schedule `name` in [start, end] that made no job; the answer
        lists every fire time with its job and whether this backfill started it."""
        answer: Json = self.call(calls.schedule_backfill(name, start, end))
        return answer

    # --- tokens --------------------------------------------------------------------------------

    def tokens(self, *, user: str | None = None) -> Iterator[Json]:
        """Your API tokens (an administrator: `user`'s). Keys are never listed."""
        return self.each(calls.tokens(user))

    def create_token(self, name: str, *, lifetime_days: float | None = None) -> Json:
        """A new token acting as you, expiring after `lifetime_days` (the service's longest when
        None); the answer holds its `key`, shown this once. Sent once: a retry could make a
        second key nobody saw."""
        answer: Json = self.call(calls.create_token(name, lifetime_days))
        return answer

    def revoke_token(self, token_id: int) -> Json:
        """Revoke a token (idempotent on the service: revoking it again answers it as it is)."""
        answer: Json = self.call(calls.revoke_token(token_id))
        return answer


class _SyncOnly(httpx.AsyncBaseTransport):
    """The async side of a sync `Client.api`: refuses, so that no async call goes out without
    the retries (AsyncClient's `api` has them)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        raise SasError(
            "the generated client's asyncio calls run on AsyncClient(...).api, not Client(...).api"
        )
