"""The client's retries and error reading, in-process: the service's side is an httpx
MockTransport (the remote boundary), answering what the test scripts; the real service's 429s
are tests/client/test_service.py's."""

from __future__ import annotations

import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sas_client import (
    Client,
    RetryEvent,
    RetryPolicy,
    SasApiError,
    SasConnectionError,
    SasError,
    SasInsecureURLWarning,
    cli,
)
from sas_client.client import TOKEN_ENV, TOKEN_FILE_ENV

pytestmark = pytest.mark.sqlite

JOB = {"id": "8b0f5e0e-0000-4000-8000-000000000001", "status": "pending", "workflow": "w"}


class Script:
    """Answers in turn (a status, or an exception to raise), recording every request."""

    def __init__(self, *answers: int | Exception | httpx.Response) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx.Response):
            return answer
        if answer == 429:
            return httpx.Response(
                429, headers={"Retry-After": "7"}, json={"detail": "slow", "code": "throttled"}
            )
        if answer >= 400:
            return httpx.Response(answer, json={"detail": f"error {answer}", "code": "boom", "field": None})
        return httpx.Response(answer, json=JOB)


def client_for(script: Script, sleeps: list[float], events: list[RetryEvent]) -> Client:
    return Client(
        "https://sas.test",
        "key",
        transport=httpx.MockTransport(script),
        sleep=sleeps.append,
        on_retry=events.append,
        retry=RetryPolicy(attempts=4, backoff_initial=0.5, jitter=0.5),
    )


@pytest.fixture
def make() -> Callable[..., tuple[Client, Script, list[float], list[RetryEvent]]]:
    def build(
        *answers: int | Exception | httpx.Response,
    ) -> tuple[Client, Script, list[float], list[RetryEvent]]:
        script, sleeps, events = Script(*answers), [], []
        return client_for(script, sleeps, events), script, sleeps, events

    return build


def test_a_read_is_retried_after_429_for_at_least_its_retry_after(make: Callable[..., tuple]) -> None:
    client, script, sleeps, events = make(429, 200)
    assert client.get(JOB["id"]) == JOB
    assert len(script.requests) == 2
    assert [e.reason for e in events] == ["429"] and events[0].retry_after == 7
    assert 7 <= sleeps[0] <= 7 * 1.5  # Retry-After, plus at most the jitter's half again


def test_a_keyed_submission_is_retried_on_5xx_and_connection_errors_with_the_same_key(
    make: Callable[..., tuple],
) -> None:
    client, script, sleeps, events = make(503, httpx.ConnectError("refused"), 201)
    assert client.submit("w", {"n": 1}) == JOB
    keys = {r.headers["Idempotency-Key"] for r in script.requests}
    assert len(script.requests) == 3 and len(keys) == 1
    assert [e.reason for e in events] == ["503", "ConnectError"]
    # Exponential backoff with jitter: 0.5 then 1.0, each plus up to half again.
    assert 0.5 <= sleeps[0] <= 0.75 and 1.0 <= sleeps[1] <= 1.5


def test_each_submission_gets_a_key_of_its_own_unless_one_is_given(make: Callable[..., tuple]) -> None:
    client, script, _, _ = make(201, 201, 201)
    client.submit("w")
    client.submit("w")
    client.submit("w", idempotency_key="order-1001")
    keys = [r.headers["Idempotency-Key"] for r in script.requests]
    assert len(set(keys[:2])) == 2 and keys[2] == "order-1001"


@pytest.mark.parametrize("status", [429, 503])
def test_a_write_without_a_key_is_sent_once_and_its_error_raised(
    make: Callable[..., tuple], status: int
) -> None:
    client, script, sleeps, events = make(status)
    with pytest.raises(SasApiError) as raised:
        client.approve(JOB["id"], "approve_charge")
    assert len(script.requests) == 1 and not sleeps and not events
    assert raised.value.status == status
    if status == 429:
        assert raised.value.retry_after == 7 and raised.value.code == "throttled"


def test_retries_stop_after_the_policys_attempts_and_the_last_error_is_raised(
    make: Callable[..., tuple],
) -> None:
    client, script, _, events = make(502, 502, 502, 502)
    with pytest.raises(SasApiError) as raised:
        client.get(JOB["id"])
    assert len(script.requests) == 4 and len(events) == 3 and raised.value.status == 502


def test_no_answer_at_all_is_a_connection_error(make: Callable[..., tuple]) -> None:
    client, *_ = make(*[httpx.ConnectError("refused")] * 4)
    with pytest.raises(SasConnectionError, match="ConnectError"):
        client.get(JOB["id"])


def test_a_retry_after_beyond_the_policys_limit_goes_to_the_caller(make: Callable[..., tuple]) -> None:
    long_wait = httpx.Response(
        429, headers={"Retry-After": "3600"}, json={"detail": "later", "code": "throttled"}
    )
    client, script, sleeps, _ = make(long_wait)
    with pytest.raises(SasApiError) as raised:
        client.get(JOB["id"])
    assert len(script.requests) == 1 and not sleeps and raised.value.retry_after == 3600


def test_the_services_error_body_is_read_into_the_error(make: Callable[..., tuple]) -> None:
    body = {"detail": "input: required", "code": "invalid", "field": "input", "input": ["required"]}
    client, *_ = make(httpx.Response(400, json=body))
    with pytest.raises(SasApiError) as raised:
        client.submit("w")
    error = raised.value
    assert (error.status, error.code, error.detail, error.field) == (
        400,
        "invalid",
        "input: required",
        "input",
    )
    assert [(e.field, e.detail) for e in error.errors] == [("input", "required")]


def test_a_problem_document_is_read_with_its_errors(make: Callable[..., tuple]) -> None:
    problem = {
        "type": "about:blank",
        "title": "Bad Request",
        "status": 400,
        "detail": "2 fields are wrong",
        "instance": "/api/v1/jobs/",
        "code": "invalid",
        "errors": [
            {"field": "workflow", "detail": "unknown", "code": "not_found"},
            {"field": "input.amount", "detail": "-5 is less than 0", "code": "invalid"},
        ],
    }
    answer = httpx.Response(400, content=json.dumps(problem).encode())
    answer.headers["Content-Type"] = "application/problem+json"
    client, *_ = make(answer)
    with pytest.raises(SasApiError) as raised:
        client.submit("w")
    error = raised.value
    assert (error.code, error.detail) == ("invalid", "2 fields are wrong")
    assert [(e.field, e.code) for e in error.errors] == [
        ("workflow", "not_found"),
        ("input.amount", "invalid"),
    ]


def test_an_answer_that_is_not_the_apis_error_shape_still_raises_with_its_status(
    make: Callable[..., tuple],
) -> None:
    client, *_ = make(httpx.Response(413, text="<html>too large</html>"))
    with pytest.raises(SasApiError) as raised:
        client.submit("w")
    assert raised.value.status == 413 and raised.value.code == "http_error"


def test_a_list_follows_each_next_link_whatever_its_paging(make: Callable[..., tuple]) -> None:
    pages = [
        httpx.Response(
            200,
            json={
                "next": "https://sas.test/api/v1/jobs/?cursor=cD0y",
                "previous": None,
                "results": [{"id": 1}, {"id": 2}],
            },
        ),
        httpx.Response(
            200,
            json={
                "next": "https://sas.test/api/v1/jobs/?cursor=cD00",
                "previous": "x",
                "results": [{"id": 3}],
            },
        ),
        httpx.Response(200, json={"next": None, "previous": "y", "results": [{"id": 4}]}),
    ]
    client, script, _, _ = make(*pages)
    assert [j["id"] for j in client.jobs(status="running")] == [1, 2, 3, 4]
    assert [str(r.url) for r in script.requests] == [
        "https://sas.test/api/v1/jobs/?status=running",
        "https://sas.test/api/v1/jobs/?cursor=cD0y",
        "https://sas.test/api/v1/jobs/?cursor=cD00",
    ]


def test_a_next_link_to_another_origin_is_not_followed_with_the_token(make: Callable[..., tuple]) -> None:
    """A page's links are data: one naming another host, scheme or port is refused before any
    request leaves, so the token is never sent there."""
    for elsewhere in (
        "https://evil.test/api/v1/jobs/?page=2",
        "http://sas.test/api/v1/jobs/?page=2",
        "https://sas.test:8443/api/v1/jobs/?page=2",
        "//evil.test/api/v1/jobs/?page=2",
    ):
        first = httpx.Response(200, json={"next": elsewhere, "previous": None, "results": [{"id": 1}]})
        client, script, _, _ = make(first)
        with pytest.raises(SasError, match="another origin"):
            list(client.jobs())
        assert [r.url.host for r in script.requests] == ["sas.test"]
    relative = httpx.Response(
        200, json={"next": "/api/v1/jobs/?page=2", "previous": None, "results": [{"id": 1}]}
    )
    last = httpx.Response(200, json={"next": None, "previous": None, "results": [{"id": 2}]})
    client, script, _, _ = make(relative, last)
    assert [j["id"] for j in client.jobs()] == [1, 2]
    assert str(script.requests[-1].url) == "https://sas.test/api/v1/jobs/?page=2"


def test_plain_http_to_another_host_warns_and_loopback_does_not() -> None:
    with pytest.warns(SasInsecureURLWarning, match="in clear"):
        Client("http://sas.example.com", "key").close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for url in (
            "http://127.0.0.1:8000",
            "http://localhost:8000",
            "http://[::1]:8000",
            "https://sas.example.com",
        ):
            Client(url, "key").close()


def test_the_token_is_read_from_a_file_when_neither_argument_nor_environment_gives_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "token"
    secret.write_text("sas_abc123\n")
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.setenv(TOKEN_FILE_ENV, str(secret))
    with Client("https://sas.test") as client:
        assert client.token == "sas_abc123"
    monkeypatch.setenv(TOKEN_ENV, "from-env")
    with Client("https://sas.test") as client:
        assert client.token == "from-env"
    with Client("https://sas.test", token_file=str(secret)) as client:
        assert client.token == "sas_abc123"  # named by the caller: before the environment's
    with pytest.raises(SasError, match="cannot read the token file"):
        Client("https://sas.test", token_file=str(tmp_path / "missing"))


def test_the_cli_warns_of_a_token_on_its_command_line_and_reads_one_from_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    seen: list[str] = []

    def fake_tokens(self: Client, *, user: str | None = None) -> list[dict]:
        seen.append(self.token or "")
        return []

    monkeypatch.setattr(Client, "tokens", fake_tokens)
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    out, err = io.StringIO(), io.StringIO()
    assert (
        cli.main(
            ["--url", "https://sas.test", "--token-file", str(secret), "tokens", "list"], out=out, err=err
        )
        == 0
    )
    assert seen == ["from-file"] and "warning" not in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert (
        cli.main(
            ["--url", "http://sas.example.com", "--token", "on-the-line", "tokens", "list"], out=out, err=err
        )
        == 0
    )
    assert "shows in ps" in err.getvalue() and "in clear" in err.getvalue()
    assert seen[-1] == "on-the-line"
