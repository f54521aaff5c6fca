"""`AsyncClient`: the facade for asyncio programs, answering with the generated typed models.

The same constructor options, connection, retries (`AsyncRetryTransport`: the same
`RetryPolicy.decide` as the sync client's), `Retry-After`, keys and pagination as `Client`: both
send the calls `sas_client.calls` describes. Where `Client` answers the API's JSON as dicts, this
one reads each answer into the model the schema names (`sas_client.openapi.models.Job`,
`JobSummary`, `Step`, ...); `call_json` and `each_json` give the JSON when a program wants it.
`api` is the generated client on the same connection, for its `asyncio` calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any

import httpx

from sas_client import calls
from sas_client.calls import MAX_BATCH, SETTLED, BatchProgress, BatchResult, Call, Json
from sas_client.client import Connection, SasWaitTimeout, read_json
from sas_client.errors import SasApiError
from sas_client.openapi import AuthenticatedClient, models
from sas_client.transport import AsyncRetryTransport, RetryHook, RetryPolicy


class AsyncClient:
    """`Client`'s twin for asyncio: `async with AsyncClient() as sas: job = await sas.get(id)`.

    The arguments are `Client`'s; `sleep` is awaited (`asyncio.sleep` unless given) and
    `transport` is an `httpx.AsyncBaseTransport`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        token_file: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        on_retry: RetryHook | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.connection = Connection.resolve(url, token, token_file)
        self.url, self.token = self.connection.url, self.connection.token
        self.sleep = sleep
        self.transport = AsyncRetryTransport(transport, policy=retry, sleep=sleep, on_retry=on_retry)
        self.http = httpx.AsyncClient(
            base_url=self.url, headers=self.connection.headers, timeout=timeout, transport=self.transport
        )
        self._api: AuthenticatedClient | None = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    @property
    def api(self) -> AuthenticatedClient:
        """The generated client on this connection, for its `asyncio` and `asyncio_detailed`
        calls (with the retries and the token):

            from sas_client.openapi.api.jobs import jobs_read
            job = await jobs_read.asyncio(client=sas.api, job_id=job_id)
        """
        if self._api is None:
            self._api = AuthenticatedClient(base_url=self.url, token=self.token or "", prefix="Token")
            self._api.set_async_httpx_client(self.http)
        return self._api

    # --- the plumbing --------------------------------------------------------------------------

    async def send(self, call: Call) -> httpx.Response:
        """`call` sent; its answer, or the error it is (`SasApiError`, `SasConnectionError`)."""
        try:
            response = await self.http.request(call.method, call.path, **self.connection.send_options(call))
        except httpx.TransportError as exc:
            raise self.connection.unreachable(call, exc) from exc
        return self.connection.answer(response)

    async def call_json(self, call: Call) -> Any:
        return read_json(await self.send(call))

    async def call(self, call: Call) -> Any:
        """`call`'s answer read into its model (the JSON when the call names none)."""
        answer = await self.call_json(call)
        return answer if call.model is None or answer is None else call.model.from_dict(answer)

    async def each_json(self, call: Call) -> AsyncIterator[Json]:
        """Every item of the list `call` reads, following each page's `next` on the service's own
        origin only."""
        page = await self.call_json(call)
        while True:
            for item in page["results"]:
                yield item
            if not page.get("next"):
                return
            page = await self.call_json(Call("GET", self.connection.same_origin(page["next"])))

    async def each(self, call: Call) -> AsyncIterator[Any]:
        async for item in self.each_json(call):
            yield call.model.from_dict(item) if call.model is not None else item

    # --- jobs ----------------------------------------------------------------------------------

    async def submit(
        self,
        workflow: str,
        input: Mapping[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        business_key: str | None = None,
        priority: int | None = None,
        callback_url: str | None = None,
    ) -> models.Job:
        """`Client.submit`: keyed, so a retried request finds its job."""
        call = calls.submit(
            workflow,
            input,
            idempotency_key=idempotency_key,
            business_key=business_key,
            priority=priority,
            callback_url=callback_url,
        )
        job: models.Job = await self.call(call)
        return job

    async def submit_batch(
        self,
        jobs: Iterable[Mapping[str, Any]],
        *,
        chunk_size: int = MAX_BATCH,
        progress: BatchProgress | None = None,
    ) -> BatchResult:
        """`Client.submit_batch`: the chunks in turn, each item keyed; the same `BatchResult`."""
        batch = calls.Batch(jobs, chunk_size)
        for start, chunk in batch.chunks():
            try:
                batch.record(start, await self.call_json(calls.batch_chunk(chunk)))
            except SasApiError as error:
                batch.refuse(start, len(chunk), error)
            if progress is not None:
                progress(start + len(chunk), len(batch.items))
        return batch.result

    async def get(self, job_id: str) -> models.Job:
        job: models.Job = await self.call(calls.get(job_id))
        return job

    def jobs(self, *, page_size: int | None = None, **filters: Any) -> AsyncIterator[models.JobSummary]:
        """Jobs newest first, across every page: `Client.jobs`'s filters (`status`, `workflow`,
        `business_key`, `idempotency_key`, `created_after`, `created_before`, `input.<field>`)."""
        return self.each(calls.jobs({**filters, "page_size": page_size}))

    def events(self, job_id: str, *, page_size: int | None = None) -> AsyncIterator[models.Event]:
        return self.each(calls.events(job_id, page_size))

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        interval: float = 0.5,
        max_interval: float = 5.0,
        progress: Callable[[models.Job], None] | None = None,
    ) -> models.Job:
        """`Client.wait`: the job once settled; `SasWaitTimeout` (with the last state as JSON)
        when `timeout` passes first."""
        polling = calls.Polling(timeout, interval, max_interval)
        while True:
            job = await self.get(job_id)
            if progress is not None:
                progress(job)
            if str(job.status) in SETTLED:
                return job
            pause = polling.pause()
            if pause is None:
                raise SasWaitTimeout(job.to_dict(), timeout or 0.0)
            await self.sleep(pause)

    async def rerun(
        self,
        job_id: str,
        *,
        from_step: str,
        input: Mapping[str, Any] | None = None,
        reason: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.Job:
        call = calls.rerun(
            job_id, from_step=from_step, input=input, reason=reason, idempotency_key=idempotency_key
        )
        job: models.Job = await self.call(call)
        return job

    async def job_action(self, verb: str, job_id: str, *, reason: str | None = None) -> models.Job:
        """`cancel`, `compensate`, `pause` or `resume` (operators). Sent once."""
        job: models.Job = await self.call(calls.job_action(verb, job_id, reason))
        return job

    async def cancel(self, job_id: str, *, reason: str | None = None) -> models.Job:
        return await self.job_action("cancel", job_id, reason=reason)

    async def signal(
        self, job_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
    ) -> models.Signal:
        answer: models.Signal = await self.call(calls.signal(job_id, name, payload, idempotency_key))
        return answer

    def signals(self, job_id: str) -> AsyncIterator[models.Signal]:
        return self.each(calls.signals(job_id))

    async def signal_by_key(
        self,
        business_key: str,
        name: str,
        payload: Any = None,
        *,
        workflow: str | None = None,
        idempotency_key: str | None = None,
    ) -> models.KeyedSignalAnswer:
        answer: models.KeyedSignalAnswer = await self.call(
            calls.signal_by_key(
                business_key, name, payload, workflow=workflow, idempotency_key=idempotency_key
            )
        )
        return answer

    async def post_event(
        self, type: str, id: str, source: str, data: Any = None
    ) -> models.InboundEventAnswer:
        answer: models.InboundEventAnswer = await self.call(calls.post_event(type, id, source, data))
        return answer

    async def replay_event(
        self, event: int, *, reason: str | None = None, idempotency_key: str | None = None
    ) -> models.EventReplayAnswer:
        answer: models.EventReplayAnswer = await self.call(
            calls.replay_event(event, reason=reason, idempotency_key=idempotency_key)
        )
        return answer

    async def approve(self, job_id: str, step: str, *, comment: str | None = None) -> models.Step:
        answer: models.Step = await self.call(calls.decide(job_id, step, "approve", comment))
        return answer

    async def reject(self, job_id: str, step: str, *, comment: str | None = None) -> models.Step:
        answer: models.Step = await self.call(calls.decide(job_id, step, "reject", comment))
        return answer

    # --- steps and the operator's lists -----------------------------------------------------------

    async def step(self, job_id: str, step: str | int) -> models.Step:
        """The step of a job named `step` (or whose id it is)."""
        job = await self.call_json(calls.get(job_id))
        return models.Step.from_dict(calls.find_step(job, step))

    async def retry_step(
        self,
        step_id: int,
        *,
        reason: str | None = None,
        pool: str | None = None,
        input: Mapping[str, Any] | None = None,
    ) -> models.StepActionResult:
        answer: models.StepActionResult = await self.call(
            calls.retry_step(step_id, reason=reason, pool=pool, input=input)
        )
        return answer

    async def resolve_step(
        self, step_id: int, *, output: Mapping[str, Any] | None, reason: str | None = None
    ) -> models.StepActionResult:
        answer: models.StepActionResult = await self.call(
            calls.resolve_step(step_id, output=output, reason=reason)
        )
        return answer

    def attention(self, **filters: Any) -> AsyncIterator[models.AttentionItem]:
        return self.each(calls.attention(filters))

    async def bulk(
        self,
        action: str,
        step_ids: Iterable[int],
        *,
        reason: str | None = None,
        dry_run: bool = False,
        idempotency_key: str | None = None,
    ) -> models.BulkResult:
        call = calls.bulk(action, step_ids, reason=reason, dry_run=dry_run, idempotency_key=idempotency_key)
        answer: models.BulkResult = await self.call(call)
        return answer

    async def supervisor(self) -> models.SupervisorStatus:
        answer: models.SupervisorStatus = await self.call(calls.supervisor())
        return answer

    # --- definitions and tokens ----------------------------------------------------------------

    def definitions(self, kind: str) -> AsyncIterator[Any]:
        """Every workflow, pool, policy or schedule, as its model."""
        return self.each(calls.definitions(kind))

    async def definition(self, kind: str, name: str) -> Any:
        """The `kind` named `name` as its model, None when there is none."""
        try:
            return await self.call(calls.definition(kind, name))
        except SasApiError as error:
            if error.status == 404:
                return None
            raise

    async def backfill_schedule(self, name: str, *, start: str, end: str) -> models.ScheduleBackfillAnswer:
        """Start the fire times of schedule `name` in [start, end] that made no job."""
        answer: models.ScheduleBackfillAnswer = await self.call(calls.schedule_backfill(name, start, end))
        return answer

    def tokens(self, *, user: str | None = None) -> AsyncIterator[models.Token]:
        return self.each(calls.tokens(user))

    async def create_token(self, name: str, *, lifetime_days: float | None = None) -> models.TokenCreated:
        """Sent once: a retry could make a second key nobody saw."""
        answer: models.TokenCreated = await self.call(calls.create_token(name, lifetime_days))
        return answer

    async def revoke_token(self, token_id: int) -> models.Token:
        answer: models.Token = await self.call(calls.revoke_token(token_id))
        return answer
