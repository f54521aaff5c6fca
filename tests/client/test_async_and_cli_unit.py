"""AsyncClient's retries and the `sas` command's stderr and completion, in-process: the service's
side is an httpx MockTransport (the remote boundary) answering what the test scripts. The real
service's answers are tests/client/test_service.py's and test_cli_service.py's."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import subprocess
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sas_client import AsyncClient, RetryEvent, RetryPolicy, SasApiError, cli
from sas_client.cli_defs import differences
from sas_client.openapi.api.jobs import jobs_read
from sas_client.openapi.models import Job

pytestmark = pytest.mark.sqlite

JOB_ID = "8b0f5e0e-0000-4000-8000-000000000001"
JOB = {
    "id": JOB_ID,
    "workflow": "w",
    "workflow_version": 1,
    "status": "succeeded",
    "input": {},
    "result": None,
    "business_key": "",
    "priority": 0,
    "steps": [],
}


class Script:
    """Answers in turn (a status, or an exception to raise), recording every request."""

    def __init__(self, *answers: int | Exception | httpx.Response, body: Any = None) -> None:
        self.answers = list(answers)
        self.body = body if body is not None else JOB
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        if answer in (429, 503):
            return httpx.Response(
                answer, headers={"Retry-After": "2"}, json={"detail": "later", "code": "busy"}
            )
        if answer >= 400:
            return httpx.Response(answer, json={"detail": f"error {answer}", "code": "boom"})
        return httpx.Response(answer, json=self.body)


def async_client(script: Script, sleeps: list[float], events: list[RetryEvent]) -> AsyncClient:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    return AsyncClient(
        "https://sas.test",
        "key",
        transport=httpx.MockTransport(script),
        sleep=sleep,
        on_retry=events.append,
        retry=RetryPolicy(attempts=4, jitter=0.5),
    )


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_the_async_client_waits_for_retry_after_on_503_and_429_then_answers_a_typed_job(
    fake_job: dict[str, Any],
) -> None:
    script, sleeps, events = Script(503, 429, 200, body=fake_job), [], []

    async def read() -> Any:
        async with async_client(script, sleeps, events) as sas:
            return await sas.get(JOB_ID)

    job = run(read())
    assert isinstance(job, Job) and str(job.id) == JOB_ID
    assert len(script.requests) == 3
    assert [e.reason for e in events] == ["503", "429"] and all(e.retry_after == 2 for e in events)
    assert all(2 <= s <= 3 for s in sleeps)  # Retry-After, plus at most half again


def test_an_async_write_without_a_key_is_sent_once_and_a_keyed_one_is_retried_with_its_key(
    fake_job: dict[str, Any],
) -> None:
    once, sleeps, events = Script(503), [], []

    async def cancel() -> None:
        async with async_client(once, sleeps, events) as sas:
            await sas.cancel(JOB_ID)

    with pytest.raises(SasApiError) as raised:
        run(cancel())
    assert raised.value.status == 503 and len(once.requests) == 1 and not sleeps and not events

    keyed = Script(httpx.ConnectError("refused"), 503, 201, body=fake_job)

    async def submit() -> Job:
        async with async_client(keyed, [], []) as sas:
            return await sas.submit("w", {"n": 1})

    assert isinstance(run(submit()), Job)
    assert len({r.headers["Idempotency-Key"] for r in keyed.requests}) == 1 and len(keyed.requests) == 3


def test_the_async_clients_lists_follow_next_links_and_read_models() -> None:
    pages = [
        httpx.Response(200, json={"next": "https://sas.test/api/v1/tokens/?page=2", "results": [token(1)]}),
        httpx.Response(200, json={"next": None, "results": [token(2)]}),
    ]
    script = Script(*pages)

    async def listed() -> list[Any]:
        async with async_client(script, [], []) as sas:
            return [t async for t in sas.tokens()]

    found = run(listed())
    assert [t.id for t in found] == [1, 2] and type(found[0]).__name__ == "Token"
    assert str(script.requests[1].url) == "https://sas.test/api/v1/tokens/?page=2"


def test_the_generated_async_calls_go_through_the_retrying_transport(fake_job: dict[str, Any]) -> None:
    script, sleeps, events = Script(503, 503, 200, body=fake_job), [], []

    async def read() -> Any:
        async with async_client(script, sleeps, events) as sas:
            return await jobs_read.asyncio(client=sas.api, job_id=uuid.UUID(JOB_ID))

    job = run(read())
    assert isinstance(job, Job) and len(script.requests) == 3 and len(events) == 2
    assert script.requests[-1].headers["Authorization"] == "Token key"


def test_the_sync_clients_generated_client_refuses_async_calls_rather_than_skip_the_retries() -> None:
    from sas_client import Client, SasError

    transport = httpx.MockTransport(Script(200))
    with (
        Client("https://sas.test", "key", transport=transport) as sas,
        pytest.raises(SasError, match="AsyncClient"),
    ):
        run(jobs_read.asyncio(client=sas.api, job_id=uuid.UUID(JOB_ID)))


def token(n: int) -> dict[str, Any]:
    return {
        "id": n,
        "name": f"t{n}",
        "prefix": "sas_x",
        "user": "ops",
        "status": "active",
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": None,
        "last_used_at": None,
        "revoked_at": None,
        "revoked_by": None,
    }


@pytest.fixture
def fake_job() -> dict[str, Any]:
    """A job as the service answers it: every field the generated model requires."""
    return {
        **JOB,
        "paused": False,
        "at_risk": False,
        "compensation_reason": "",
        "submitter": "ops",
        "rerun_of": None,
        "parent_job": None,
        "parent_step": "",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:01Z",
        "finished_at": None,
        "paused_at": None,
        "deadline": None,
        "waiting_for": None,
        "started_by_event": None,
        "callback_url": None,
        "callbacks": [],
        "reruns": [],
    }


# --- the command's stderr ---------------------------------------------------------------------------


def cli_with(monkeypatch: pytest.MonkeyPatch, script: Script) -> Callable[..., tuple[int, str, str]]:
    """`sas` in-process against the script, with waits that do not wait."""
    import sas_client.client as client_module

    real = client_module.Client

    def fake(*args: Any, **kwargs: Any) -> Any:
        policy = RetryPolicy(attempts=3, jitter=0.0)
        return real(
            *args, transport=httpx.MockTransport(script), sleep=lambda s: None, retry=policy, **kwargs
        )

    monkeypatch.setattr(cli, "Client", fake)

    def invoke(*argv: str) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["--url", "https://sas.test", "--token", "k", *argv], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    return invoke


def test_each_retry_is_said_on_stderr_as_it_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    invoke = cli_with(monkeypatch, Script(503, 200))
    code, out, err = invoke("jobs", "get", JOB_ID, "--json")
    assert code == 0 and json.loads(out)["id"] == JOB_ID
    assert f"sas: retrying in 2.0 s (attempt 2 of 3): 503 GET /api/v1/jobs/{JOB_ID}/" in err


def test_a_batch_says_its_progress_on_stderr_chunk_by_chunk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def made(n: int) -> dict[str, Any]:
        return {"jobs": [{"index": i, "id": f"id-{n}-{i}", "created": True, "url": "u"} for i in range(2)]}

    last = {"jobs": [{"index": 0, "id": "last", "created": True, "url": "u"}]}
    script = Script(*(httpx.Response(201, json=body) for body in (made(0), made(1), last)))
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(json.dumps({"workflow": "w", "input": {"n": n}}) + "\n" for n in range(5)))
    code, _, err = cli_with(monkeypatch, script)("jobs", "submit-batch", str(lines), "--chunk-size", "2")
    assert code == 0
    assert [line for line in err.splitlines() if "jobs sent" in line] == [
        "sas: 2 of 5 jobs sent",
        "sas: 4 of 5 jobs sent",
        "sas: 5 of 5 jobs sent",
    ]


def test_a_wait_on_a_terminal_redraws_one_line_with_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    from sas_client.cli_progress import Status, job_progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    report = job_progress(Status(screen))
    steps = [{"name": "a", "status": "succeeded"}, {"name": "b", "status": "running"}]
    report({"id": "j", "status": "running", "steps": steps})
    report({"id": "j", "status": "succeeded", "steps": [{**s, "status": "succeeded"} for s in steps]})
    drawn = screen.getvalue()
    assert drawn.count("\r\x1b[K") == 2 and drawn.endswith("\n") and drawn.count("\n") == 1
    assert "1/2 steps (b)" in drawn and "2/2 steps" in drawn and "[" + "#" * 24 + "]" in drawn


# --- completion and apply's comparison --------------------------------------------------------------


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_bash_completion_completes_commands_and_options_by_position() -> None:
    out = io.StringIO()
    assert cli.main(["completion", "bash"], out=out) == 0

    def complete(*words: str) -> list[str]:
        line = " ".join(["sas", *words])
        program = (
            f"{out.getvalue()}\nCOMP_WORDS=(sas {' '.join(words)}); COMP_CWORD={len(words)}; "
            f'COMP_LINE="{line}"; _sas; printf "%s\\n" "${{COMPREPLY[@]}}"'
        )
        result = subprocess.run(
            ["bash", "-c", program], capture_output=True, text=True, check=True, timeout=30
        )
        return result.stdout.split()

    assert complete("att") == ["attention"]
    assert sorted(complete("jobs", "p")) == ["pause"]
    assert complete("--json", "attention", "bulk", "--d") == ["--dry-run"]
    assert "--dry-run" in complete("apply", "-f", "x.yaml", "--")


def test_the_zsh_completion_runs_the_same_script_through_bashcompinit() -> None:
    out = io.StringIO()
    assert cli.main(["completion", "zsh"], out=out) == 0
    assert out.getvalue().startswith("autoload -U +X bashcompinit && bashcompinit\n")
    assert "complete -F _sas sas" in out.getvalue()


def test_apply_compares_only_what_the_file_states_as_the_service_means_it() -> None:
    held = {
        "name": "payments",
        "kind": "http",
        "max_in_flight": 10,
        "rate": None,
        "endpoints": [
            {"url": "http://a/", "enabled": True, "secret_header_name": "X", "secret_header_set": True}
        ],
        "updated_at": "2026-01-01T00:00:00Z",
    }
    same = {
        "name": "payments",
        "kind": "http",
        "max_in_flight": 10.0,
        "rate": None,
        "endpoints": ["http://a/"],
    }
    assert differences(same, held) == []
    secret = {"endpoints": [{"url": "http://a/", "secret_header_name": "X", "secret_header_value": "s"}]}
    assert differences(secret, held) == []
    assert differences({"max_in_flight": 20, "endpoints": ["http://b/"]}, held) == [
        ("max_in_flight", 10, 20),
        ("endpoints[0]", "http://a/", "http://b/"),
    ]
    assert differences({"run_at": "2026-01-01T01:00:00+01:00"}, {"run_at": "2026-01-01T00:00:00Z"}) == []


def test_sas_schedules_backfill_posts_the_range_retries_it_safely_and_lists_each_fire_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answer = {
        "fire_times": [
            {"fire_at": "2026-03-01T10:00:00Z", "job": JOB_ID, "started": True},
            {"fire_at": "2026-03-01T11:00:00Z", "job": JOB_ID, "started": False},
        ],
        "started": 1,
        "already_fired": 1,
    }
    script = Script(503, 200, body=answer)
    invoke = cli_with(monkeypatch, script)
    code, out, err = invoke(
        "schedules", "backfill", "hourly", "--start", "2026-03-01T09:30:00Z", "--end", "2026-03-01T11:30:00Z"
    )
    assert code == 0, err
    # A second backfill of a range starts nothing: the client may send it again after a 503.
    assert [r.url.path for r in script.requests] == ["/api/v1/schedules/hourly/backfill/"] * 2
    assert json.loads(script.requests[-1].content) == {
        "start": "2026-03-01T09:30:00Z",
        "end": "2026-03-01T11:30:00Z",
    }
    assert "2026-03-01T10:00:00Z" in out and "started" in out and "had fired" in out
    assert "1 jobs started, 1 fire times had fired already" in err
