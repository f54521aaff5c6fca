"""Where agents may call: http(s) endpoints and redis/amqp brokers, only allowed hosts when
SAS_AGENT_ALLOWED_HOSTS is set; and which python callables a python step may name
(SAS_PYTHON_AGENTS).

Checked when a definition is saved and again when a call is made, so a changed setting applies to
definitions saved earlier.
"""

from __future__ import annotations

import re
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


#: Broker URL schemes a queue pool's endpoint may use (kombu transports).
BROKER_SCHEMES = {"redis", "rediss", "amqp", "amqps"}
#: A queue name: what Redis and AMQP both accept without quoting.
QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


def validate_broker_url(url: str) -> str:
    """A queue pool's endpoint: redis://, rediss://, amqp:// or amqps:// with a host (and for Redis
    a database number), the allowed hosts as for HTTP endpoints, and no credentials in the URL
    (they go in the endpoint's secret, never shown)."""
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput("broker URL is empty")
    url = url.strip()
    if any(ch.isspace() for ch in url) or len(url) > 500:
        raise InvalidInput(f"broker URL {url[:100]!r} is not a valid URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"broker URL {url[:100]!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in BROKER_SCHEMES:
        raise InvalidInput(f"broker URL {url[:100]!r} must use {', '.join(sorted(BROKER_SCHEMES))}")
    if not parts.hostname:
        raise InvalidInput(f"broker URL {url[:100]!r} has no host")
    if parts.username or parts.password:
        raise InvalidInput("broker URL must not carry credentials; use the endpoint's secret")
    if parts.query or parts.fragment:
        raise InvalidInput("broker URL must not have a query or fragment")
    if parts.scheme.startswith("redis") and parts.path not in ("", "/") and not parts.path[1:].isdigit():
        raise InvalidInput(f"broker URL {url[:100]!r}: a Redis database is a number (redis://host:6379/0)")
    _check_allowed_host(parts.hostname, port, "broker")
    return url.rstrip("/") if parts.path in ("", "/") else url


def validate_queue_name(name: str) -> str:
    """A request, compensation or status queue of a queue pool's step."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name.strip()):
        raise InvalidInput(
            f"queue name {str(name)[:100]!r} must be 1-200 letters, digits, '.', '_', ':' or '-'"
        )
    return name.strip()


def _check_allowed_host(hostname: str, port: int | None, what: str) -> None:
    allowed = sas_settings.agent_allowed_hosts
    if allowed:
        host = hostname.lower()
        host_port = f"{host}:{port}" if port else host
        if host not in allowed and host_port not in allowed:
            raise InvalidInput(
                f"{what} host {host!r} is not in SAS_AGENT_ALLOWED_HOSTS ({', '.join(allowed)})"
            )


def python_agent_allowed(path: str) -> bool:
    """Whether SAS_PYTHON_AGENTS registers the callable `path` (an entry ending in `.*` registers
    every callable of that module)."""
    for entry in sas_settings.python_agents:
        if entry == path or (entry.endswith(".*") and path.rpartition(".")[0] == entry[:-2]):
            return True
    return False


def validate_python_agent(path: str) -> str:
    """A python step's callable: a dotted path registered in SAS_PYTHON_AGENTS. Checked when a
    workflow is saved and again when the call is made."""
    path = validate_operation_path(path, http=False)
    if not python_agent_allowed(path):
        raise InvalidInput(
            f"{path!r} is not a registered python agent: add it to the setting SAS_PYTHON_AGENTS"
        )
    return path
