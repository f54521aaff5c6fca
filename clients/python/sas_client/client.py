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
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sas_client.errors import SasApiError, SasConnectionError, SasError
from sas_client.openapi import AuthenticatedClient
from sas_client.transport import IDEMPOTENT, RetryHook, RetryPolicy, RetryTransport

#: The environment variables a Client reads when it is given no URL or token.
URL_ENV = "SAS_URL"
TOKEN_ENV = "SAS_TOKEN"  # noqa: S105 - the name of a variable, not a secret
#: A file holding the token, read when neither `token` nor `$SAS_TOKEN` gives one: a secret in a
#: file is out of `ps`, the shell's history and the environment of every child process.
TOKEN_FILE_ENV = "SAS_TOKEN_FILE"  # noqa: S105 - the name of a variable, not a secret
#: What `make run` serves.
DEFAULT_URL = "http://127.0.0.1:8000"
#: The statuses a job ends in; it changes no more after one of them.
SETTLED = frozenset({"succeeded", "failed", "compensated", "cancelled"})
#: The most jobs the service takes in one batch request by default (SAS_MAX_BATCH_JOBS).
MAX_BATCH = 100

Json = dict[str, Any]


class SasWaitTimeout(SasError):
    """The job had not settled when the wait's time ran out; `job` is the last state seen."""

    def __init__(self, job: Json, timeout: float) -> None:
        super().__init__(f"job {job.get('id')} is still {job.get('status')} after {timeout:g}s")
        self.job = job
        self.timeout = timeout


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
        self.url = (url or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        self.origin = httpx.URL(self.url)
        if self.origin.scheme == "http" and not _loopback(self.origin.host):
            warnings.warn(
                f"{self.url} is plain HTTP to another host: the token crosses the network in clear "
                "(use https://)",
                SasInsecureURLWarning,
                stacklevel=2,
            )
        # What the caller names first (the token, then its file), then the environment's.
        if token is None and token_file:
            token = read_token(token_file)
        if token is None:
            token = os.environ.get(TOKEN_ENV)
        if token is None and os.environ.get(TOKEN_FILE_ENV):
            token = read_token(os.environ[TOKEN_FILE_ENV])
        self.token = token
        self.sleep = sleep
        headers = {"Accept": "application/json, application/problem+json", "User-Agent": "sas-client"}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        self.transport = RetryTransport(transport, policy=retry, sleep=sleep, on_retry=on_retry)
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout, transport=self.transport
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
        """
        if self._api is None:
            self._api = AuthenticatedClient(base_url=self.url, token=self.token or "", prefix="Token")
            self._api.set_httpx_client(self.http)
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
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self.http.request(
                method,
                path,
                json=json_body,
                params=query or None,
                headers=dict(headers or {}),
                extensions={IDEMPOTENT: True} if idempotent else None,
            )
        except httpx.TransportError as exc:
            raise SasConnectionError(f"{method} {self.url}{path}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 400:
            raise SasApiError.from_response(response)
        return response

    def _json(self, method: str, path: str, **options: Any) -> Any:
        response = self.request(method, path, **options)
        return json.loads(response.content) if response.content else None

    def pages(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Json]:
        """Every item of a list, page after page: the first page from `path` with `params`, then
        the page each answer's `next` names, until there is none. The paging parameters live in
        `next` (page numbers today, cursors tomorrow), so nothing here depends on them."""
        page = self._json("GET", path, params=params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self._json("GET", self._same_origin(page["next"]))

    def _same_origin(self, link: str) -> str:
        """`link` as an absolute URL on the service, refused when it names another origin: the client
        sends its token with every request, and a page's links are data it did not choose."""
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
        body = _submission(workflow, input, business_key, priority, callback_url)
        key = idempotency_key or new_key()
        job: Json = self._json("POST", "/api/v1/jobs/", json_body=body, headers={"Idempotency-Key": key})
        return job

    def submit_batch(self, jobs: Iterable[Mapping[str, Any]], *, chunk_size: int = MAX_BATCH) -> BatchResult:
        """Submit many jobs through `POST /api/v1/jobs/batch/`, `chunk_size` a request (the
        service's SAS_MAX_BATCH_JOBS at most). Each job is a single submission's body
        (`workflow`, `input`, `business_key`, ...) with its `idempotency_key` (made here when
        absent). A refused chunk does not stop the others: the result says what happened to
        every item."""
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1")
        items = [{**job, "idempotency_key": job.get("idempotency_key") or new_key()} for job in jobs]
        result = BatchResult(
            items=[
                BatchItem(index=n, idempotency_key=item["idempotency_key"]) for n, item in enumerate(items)
            ]
        )
        for start in range(0, len(items), chunk_size):
            chunk = items[start : start + chunk_size]
            try:
                # Every item has a key, so the request may be sent again: it finds its jobs.
                answer = self._json("POST", "/api/v1/jobs/batch/", json_body={"jobs": chunk}, idempotent=True)
            except SasApiError as error:
                _refuse_chunk(result.items[start : start + len(chunk)], error)
                continue
            for made in answer["jobs"]:
                item = result.items[start + made["index"]]
                item.id, item.created, item.url = made["id"], made["created"], made["url"]
        return result

    def get(self, job_id: str) -> Json:
        """A job with its steps and their attempts."""
        job: Json = self._json("GET", f"/api/v1/jobs/{job_id}/")
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
        return self.pages("/api/v1/jobs/", params)

    def events(self, job_id: str, *, page_size: int | None = None) -> Iterator[Json]:
        """A job's history, oldest first, across every page."""
        return self.pages(f"/api/v1/jobs/{job_id}/events/", {"page_size": page_size})

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
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.get(job_id)
            if progress is not None:
                progress(job)
            if job["status"] in SETTLED:
                return job
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise SasWaitTimeout(job, timeout or 0.0)
            pause = interval if deadline is None else min(interval, max(0.0, deadline - now))
            self.sleep(pause)
            interval = min(max_interval, interval * 1.5)

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
        body = {"from_step": from_step, "input": input, "reason": reason}
        job: Json = self._json(
            "POST",
            f"/api/v1/jobs/{job_id}/rerun/",
            json_body={k: v for k, v in body.items() if v is not None},
            headers={"Idempotency-Key": idempotency_key or new_key()},
        )
        return job

    def cancel(self, job_id: str, *, reason: str | None = None) -> Json:
        """Cancel a job (operators). Sent once: not retried."""
        answer: Json = self._json("POST", f"/api/v1/jobs/{job_id}/cancel/", json_body=_reason(reason))
        return answer

    def signal(
        self, job_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> Json:
        """Send the signal `name` to a job; the signal (`consumed_by` names the step that took
        it). Keyed like a submission, so a retry sends it once."""
        answer: Json = self._json(
            "POST",
            f"/api/v1/jobs/{job_id}/signals/",
            json_body={"name": name, "payload": payload},
            headers={"Idempotency-Key": idempotency_key or new_key()},
        )
        return answer

    def signals(self, job_id: str) -> Iterator[Json]:
        return self.pages(f"/api/v1/jobs/{job_id}/signals/")

    def approve(self, job_id: str, step: str, *, comment: str | None = None) -> Json:
        """Approve a step waiting for an approval; the step. Sent once: not retried."""
        return self._decide(job_id, step, "approve", comment)

    def reject(self, job_id: str, step: str, *, comment: str | None = None) -> Json:
        """Reject a step waiting for an approval; the step. Sent once: not retried."""
        return self._decide(job_id, step, "reject", comment)

    def _decide(self, job_id: str, step: str, decision: str, comment: str | None) -> Json:
        body = {"comment": comment} if comment is not None else {}
        answer: Json = self._json("POST", f"/api/v1/jobs/{job_id}/steps/{step}/{decision}/", json_body=body)
        return answer

    # --- steps ---------------------------------------------------------------------------------

    def retry_step(
        self,
        step_id: int,
        *,
        reason: str | None = None,
        pool: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> Json:
        """Dispatch a held or failed step again (operators); the step. Sent once: not retried."""
        body = {"reason": reason, "pool": pool, "input": input}
        answer: Json = self._json(
            "POST",
            f"/api/v1/steps/{step_id}/retry/",
            json_body={k: v for k, v in body.items() if v is not None},
        )
        return answer

    # --- tokens --------------------------------------------------------------------------------

    def tokens(self, *, user: str | None = None) -> Iterator[Json]:
        """Your API tokens (an administrator: `user`'s). Keys are never listed."""
        return self.pages("/api/v1/tokens/", {"user": user})

    def create_token(self, name: str, *, lifetime_days: float | None = None) -> Json:
        """A new token acting as you, expiring after `lifetime_days` (the service's longest when
        None); the answer holds its `key`, shown this once. Sent once: a retry could make a
        second key nobody saw."""
        body: Json = {"name": name}
        if lifetime_days is not None:
            body["lifetime_days"] = lifetime_days
        answer: Json = self._json("POST", "/api/v1/tokens/", json_body=body)
        return answer

    def revoke_token(self, token_id: int) -> Json:
        """Revoke a token (idempotent on the service: revoking it again answers it as it is)."""
        answer: Json = self._json("POST", f"/api/v1/tokens/{token_id}/revoke/", json_body={}, idempotent=True)
        return answer


def new_key() -> str:
    """A fresh idempotency key."""
    return str(uuid.uuid4())


def _submission(
    workflow: str,
    input: Mapping[str, Any] | None,
    business_key: str | None,
    priority: int | None,
    callback_url: str | None,
) -> Json:
    body: Json = {"workflow": workflow, "input": dict(input or {})}
    optional = {"business_key": business_key, "priority": priority, "callback_url": callback_url}
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _reason(reason: str | None) -> Json:
    return {"reason": reason} if reason is not None else {}


def _refuse_chunk(items: list[BatchItem], error: SasApiError) -> None:
    """Every item of a refused chunk carries the error; the service names the item at fault by
    its `index` in the chunk (`"detail": "jobs[2]: ..."`)."""
    at_fault = error.body.get("index") if isinstance(error.body, dict) else None
    for n, item in enumerate(items):
        item.error = error
        item.at_fault = n == at_fault
