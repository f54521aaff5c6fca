"""No log line holds an attempt's callback token (the credential of its result, in the callback
URL's path): gunicorn's access log in either format of sas_project.gunicorn_conf, and the
service's own lines (Django logs the path of every 4xx answer)."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from django.test import Client
from gunicorn.config import Config

from sas_project.gunicorn_conf import JsonLogger, RedactingLogger
from sas_project.logredact import redact_path
from tests.agents.test_async_agents import Remote, _a_live_attempt, accepting_remote  # noqa: F401 - a fixture

pytestmark = pytest.mark.sqlite

TOKEN = "eyJhdHRlbXB0Ijo0Mn0.c2lnbmF0dXJl"  # a made-up token


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def access_line(logger_class: type[RedactingLogger], path: str) -> logging.LogRecord:
    cfg = Config()
    cfg.set("accesslog", "-")
    logger = logger_class(cfg)
    collect = Collect()
    logger.access_log.addHandler(collect)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "RAW_URI": path,
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "REMOTE_ADDR": "10.0.0.7",
        "HTTP_USER_AGENT": "remote/1.0",
    }
    response = SimpleNamespace(status="200 OK", sent=12, headers=[])
    request = SimpleNamespace(headers=[("USER-AGENT", "remote/1.0")])
    logger.access(response, request, environ, dt.timedelta(milliseconds=5))
    (record,) = collect.records
    return record


@pytest.mark.parametrize("suffix", ["", "heartbeat/"])
def test_the_text_access_line_shows_the_callback_path_without_its_token(suffix: str) -> None:
    record = access_line(RedactingLogger, f"/api/v1/callbacks/{TOKEN}/{suffix}")
    line = record.getMessage()
    assert TOKEN not in line
    assert f'"POST /api/v1/callbacks/(token)/{suffix} HTTP/1.1" 200' in line


def test_the_json_access_line_shows_the_callback_path_without_its_token() -> None:
    record = access_line(JsonLogger, f"/api/v1/callbacks/{TOKEN}/")
    assert record.__dict__["path"] == "/api/v1/callbacks/(token)/"
    assert TOKEN not in str(record.__dict__)


def test_other_paths_are_logged_as_they_are() -> None:
    assert redact_path("/api/v1/jobs/8d1c/") == "/api/v1/jobs/8d1c/"
    assert access_line(JsonLogger, "/api/v1/jobs/").__dict__["path"] == "/api/v1/jobs/"


@pytest.fixture
def service_log() -> Iterator[io.StringIO]:
    """What the service's own log handler (settings.LOGGING's `console`) writes."""
    (handler,) = [h for h in logging.getLogger().handlers if h.name == "console"]
    assert isinstance(handler, logging.StreamHandler)
    written = io.StringIO()
    previous = handler.setStream(written)
    yield written
    handler.setStream(previous)


@pytest.mark.django_db
def test_the_services_line_for_a_refused_callback_shows_no_token(
    accepting_remote: Remote,  # noqa: F811 - the fixture
    settings: Any,
    service_log: io.StringIO,
) -> None:
    _, path = _a_live_attempt(accepting_remote, settings)
    token = path.rstrip("/").rsplit("/", 1)[1]
    response = Client().post(path, json.dumps({"outcome": "maybe"}), content_type="application/json")
    assert response.status_code == 400  # the token stays valid: a leak would let anyone answer
    written = service_log.getvalue()
    assert "/api/v1/callbacks/(token)/" in written and token not in written
