"""Where agents may call: http(s) only, and only allowed hosts when SAS_AGENT_ALLOWED_HOSTS is set.

Checked when an endpoint is saved and again when a call is made, so a changed setting applies to
endpoints saved earlier.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput


def validate_endpoint_url(url: str) -> str:
    """Return the URL without a trailing slash, or raise InvalidInput saying what is wrong."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("endpoint URL is empty")
    url = url.strip()
    if any(ch.isspace() for ch in url) or len(url) > 500:
        raise InvalidInput(f"endpoint URL {url[:100]!r} is not a valid URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"endpoint URL {url[:100]!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in {"http", "https"}:
        raise InvalidInput(f"endpoint URL {url[:100]!r} must use http or https")
    if not parts.hostname:
        raise InvalidInput(f"endpoint URL {url[:100]!r} has no host")
    if parts.username or parts.password:
        raise InvalidInput("endpoint URL must not carry credentials; use the secret header")
    if parts.query or parts.fragment:
        raise InvalidInput("endpoint URL must not have a query or fragment")
    allowed = sas_settings.agent_allowed_hosts
    if allowed:
        host = parts.hostname.lower()
        host_port = f"{host}:{port}" if port else host
        if host not in allowed and host_port not in allowed:
            raise InvalidInput(
                f"endpoint host {host!r} is not in SAS_AGENT_ALLOWED_HOSTS ({', '.join(allowed)})"
            )
    return url.rstrip("/")


def validate_operation_path(path: str, *, http: bool) -> str:
    """An HTTP operation path must be a path (no scheme or host: those come from the endpoint)."""
    if not isinstance(path, str) or not path.strip():
        raise InvalidInput("operation path is empty")
    path = path.strip()
    if len(path) > 300:
        raise InvalidInput("operation path is longer than 300 characters")
    if http:
        if not path.startswith("/") or path.startswith("//") or "://" in path:
            raise InvalidInput(f"operation path {path[:100]!r} must start with a single '/'")
        if any(ch.isspace() for ch in path):
            raise InvalidInput(f"operation path {path[:100]!r} contains spaces")
    else:
        if not all(part.isidentifier() for part in path.split(".")) or "." not in path:
            raise InvalidInput(f"{path[:100]!r} is not a dotted path to a callable")
    return path
