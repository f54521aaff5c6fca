"""Credentials that travel in URL paths, kept out of every log line.

An attempt's callback URL (`/api/v1/callbacks/<token>/`, `.../heartbeat/`) carries its token, the
credential of the attempt's result. Django logs the path of every 4xx answer ("Bad Request:
/api/v1/callbacks/<token>/", with the request as an extra field) and gunicorn logs every request:
both go through `redact_path` (the service's log handler through `RedactCallbackTokens`,
gunicorn's access lines through sas_project.gunicorn_conf).
"""

from __future__ import annotations

import logging
import re

#: The token segment of a callback URL's path.
CALLBACK_TOKEN = re.compile(r"(/callbacks/)[^/?#\s]+")


def redact_path(text: str) -> str:
    """`text` with the token of every callback URL in it replaced by `(token)`."""
    return CALLBACK_TOKEN.sub(r"\1(token)", text)


class RedactCallbackTokens(logging.Filter):
    """On the service's log handler: a record's message, its arguments and Django's `request`
    extra (whose text is the method and path) without callback tokens."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_path(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_path(a) if isinstance(a, str) else a for a in record.args)
        request = record.__dict__.get("request")
        if request is not None and not isinstance(request, str):
            record.request = redact_path(f"{getattr(request, 'method', '')} {getattr(request, 'path', '')}")
        return True
