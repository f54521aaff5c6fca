"""gunicorn's access log never holds an attempt's callback token (the credential of its result,
in the callback URL's path), in either log format of sas_project.gunicorn_conf."""

from __future__ import annotations

import datetime as dt
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config

from sas_project.gunicorn_conf import JsonLogger, RedactingLogger, redact_path

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
