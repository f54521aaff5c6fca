"""The outbound-URL guard: where the service may send a request.

Every outbound request (agent endpoints with their status and compensation paths, completion
callbacks, alert webhooks, and any later kind such as a queue broker URL) goes through two checks:

1. **When the URL is saved** (`validate_outbound_url`; for http(s) `validate_endpoint_url`,
   `validate_callback_url`, `validate_webhook_url`): the URL's form (scheme, host, no credentials
   unless the caller allows them), the optional restrictive list of its kind of URL, and the
   host's addresses: a literal address in any spelling (dotted, decimal `2130706433`, octal
   `0177.0.0.1`, hex, IPv6, IPv4-mapped IPv6) and, unless the caller asks for no lookup, every
   address a host name resolves to must be public. A name that does not resolve (yet) is accepted
   here: the second check decides. This check only gives the person saving a clear 400.
2. **When connecting** (`checked_addresses`, used by the httpx transport of `agents.egress`): the
   host is resolved once, every address is checked, and the connection is made to one of those
   checked addresses, so a DNS answer that changes between the check and the connection (DNS
   rebinding) cannot redirect it. This is the check that holds.

Each kind of URL (`OutboundKind`) has its own lists, since different people set them: agent
endpoints and brokers (administrators), completion callbacks (any submitter), alert webhooks
(administrators). A host one list allows is not thereby allowed to another kind:

=========  =========================== ============================
kind       restrictive list            internal hosts it may reach
=========  =========================== ============================
agent      SAS_AGENT_ALLOWED_HOSTS     SAS_OUTBOUND_INTERNAL_HOSTS
callback   SAS_CALLBACK_ALLOWED_HOSTS  SAS_CALLBACK_INTERNAL_HOSTS
webhook    SAS_WEBHOOK_ALLOWED_HOSTS   SAS_WEBHOOK_INTERNAL_HOSTS
=========  =========================== ============================

Internal addresses (loopback, private, carrier-grade NAT, link-local with the cloud metadata
address 169.254.169.254, multicast, unspecified, reserved, and their IPv6 counterparts, unique
local and site-local included) are refused unless the kind's internal list names the host (host
names, `host:port`, addresses or networks such as `10.2.0.0/16`), or its restrictive list does,
whose hosts an administrator chose one by one.

Queue pools' brokers (`redis://host:6379/0`, `amqp://host/`) go through the same two checks:
`validate_broker_url` when saved, and `pinned_broker_url` before every connection, which resolves
and checks the host and, for plain `redis`/`amqp`, connects to the checked address itself (for
`rediss`/`amqps` the name stays, so that the broker's certificate is verified against it).

The module also keeps the allow-list of python agents (SAS_PYTHON_AGENTS): the callables a
python step may name, checked when a workflow is saved and again at every call.
"""

from __future__ import annotations

import enum
import functools
import importlib
import inspect
import ipaddress
import re
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from sas_project.conf import sas_settings
from sas_project.errors import InvalidInput

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

HTTP_SCHEMES: Mapping[str, int] = {"http": 80, "https": 443}


class OutboundKind(enum.StrEnum):
    """Who sets a kind of outbound URL, hence which lists apply to it. The values of the last two
    are those of the outbox's delivery kinds (`OutboundKind(delivery.kind)`)."""

    #: Agent endpoints and queue brokers, set by administrators.
    AGENT = "agent"
    #: A job's completion callback, set by whoever submits the job.
    CALLBACK = "callback"
    #: An alert subscription's webhook, set by administrators.
    WEBHOOK = "webhook"


#: Each kind's (restrictive list, internal-hosts list), as the settings name them.
LIST_SETTINGS: Mapping[OutboundKind, tuple[str, str]] = {
    OutboundKind.AGENT: ("SAS_AGENT_ALLOWED_HOSTS", "SAS_OUTBOUND_INTERNAL_HOSTS"),
    OutboundKind.CALLBACK: ("SAS_CALLBACK_ALLOWED_HOSTS", "SAS_CALLBACK_INTERNAL_HOSTS"),
    OutboundKind.WEBHOOK: ("SAS_WEBHOOK_ALLOWED_HOSTS", "SAS_WEBHOOK_INTERNAL_HOSTS"),
}

#: What a kind's URL is called in a refusal.
_WHAT: Mapping[OutboundKind, str] = {
    OutboundKind.AGENT: "endpoint URL",
    OutboundKind.CALLBACK: "callback URL",
    OutboundKind.WEBHOOK: "webhook URL",
}


def _host_lists(kind: OutboundKind) -> tuple[list[str], list[str]]:
    """`kind`'s (restrictive list, internal-hosts list): the settings LIST_SETTINGS names."""
    if kind == OutboundKind.CALLBACK:
        return sas_settings.callback_allowed_hosts, sas_settings.callback_internal_hosts
    if kind == OutboundKind.WEBHOOK:
        return sas_settings.webhook_allowed_hosts, sas_settings.webhook_internal_hosts
    return sas_settings.agent_allowed_hosts, sas_settings.outbound_internal_hosts


class OutboundRefused(InvalidInput, code="outbound_refused"):
    """The destination is not one the service may reach (raised at save and at connect time)."""


# --- which addresses are internal -----------------------------------------------------------------

#: Cloud metadata services: named in the refusal so that nobody mistakes it for an accident.
METADATA = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254")
)

# Ranges `is_global` lets through on some Python releases although they are not reachable on the
# internet (or reach a host's own network): the whole IETF protocol block, the 6to4 relay anycast.
_NOT_PUBLIC_V4 = tuple(ipaddress.IPv4Network(n) for n in ("192.0.0.0/24", "192.88.99.0/24"))
# NAT64's well-known prefix carries an IPv4 address in its last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_v4(address: Address) -> Address:
    """The IPv4 address an IPv6 address stands for (mapped, 6to4, NAT64), else the address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address.sixtofour is not None:
            return address.sixtofour
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def internal_kind(address: Address) -> str | None:
    """Why `address` is not a public destination ("loopback", "private"...), or None if it is."""
    address = _embedded_v4(address)
    if address in METADATA:
        return "cloud metadata"
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved or any(address in net for net in _NOT_PUBLIC_V4)),
        ("site-local", isinstance(address, ipaddress.IPv6Address) and address.is_site_local),
        ("private", address.is_private),
    )
    for kind, hit in checks:
        if hit:
            return kind
    # Carrier-grade NAT (100.64.0.0/10), benchmarking and the like: not private, not global.
    return None if address.is_global else "non-public"


def literal_address(host: str) -> Address | None:
    """`host` as an address when it is one, in any spelling a resolver accepts: dotted, IPv6
    (with or without a zone), and the decimal, octal and hex forms of IPv4 (`2130706433`,
    `0177.0.0.1`, `0x7f.1`) that the C library's inet_aton turns into 127.0.0.1."""
    bare = host.split("%", 1)[0]
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if bare and all(ch in "0123456789abcdefxABCDEFX." for ch in bare) and bare[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


# --- the allow-lists ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowList:
    """Entries of a kind's internal-hosts and restrictive lists, which may be internal: host
    names (optionally with a port) match the URL's host; addresses and networks (optionally with
    a port) match the addresses it resolves to."""

    names: frozenset[tuple[str, int | None]]
    networks: tuple[tuple[Network, int | None], ...]

    def names_host(self, host: str, port: int) -> bool:
        host = _normal_host(host)
        return (host, None) in self.names or (host, port) in self.names

    def covers(self, address: Address, port: int) -> bool:
        return any(address in net and want in (None, port) for net, want in self.networks)


def _normal_host(host: str) -> str:
    return host.strip().lower().rstrip(".").strip("[]")


def _split_port(entry: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]:port`, `a.b.c.d/n` -> (host or network, port)."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


@functools.lru_cache(maxsize=32)
def _parse_allow_list(entries: tuple[str, ...]) -> AllowList:
    names: set[tuple[str, int | None]] = set()
    networks: list[tuple[Network, int | None]] = []
    for raw in entries:
        host, port = _split_port(raw.strip())
        try:
            networks.append((ipaddress.ip_network(host, strict=False), port))
            continue
        except ValueError:
            pass
        literal = literal_address(host)
        if literal is not None:
            networks.append((ipaddress.ip_network(literal), port))
        else:
            names.add((_normal_host(host), port))
    return AllowList(frozenset(names), tuple(networks))


def internal_allow_list(kind: OutboundKind = OutboundKind.AGENT) -> AllowList:
    """What a kind of URL may reach although internal: its internal-hosts list plus its
    restrictive list (for agents, SAS_OUTBOUND_INTERNAL_HOSTS plus SAS_AGENT_ALLOWED_HOSTS)."""
    restricted, internal = _host_lists(kind)
    return _parse_allow_list((*internal, *restricted))


# --- resolution -------------------------------------------------------------------------------


def resolve(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, in the resolver's order, each once (raises OSError when
    it does not resolve). The boundary tests replace to make a name resolve to a chosen address."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


#: Save-time answers, kept briefly so that a burst of submissions naming one callback host costs
#: one lookup. Connections never use it: they resolve afresh and check what they connect to.
_SAVE_CACHE: dict[tuple[str, int], tuple[float, list[str] | None]] = {}
_SAVE_CACHE_LOCK = threading.Lock()
SAVE_CACHE_SECONDS = 30.0
SAVE_CACHE_SIZE = 1024


def clear_resolution_cache() -> None:
    with _SAVE_CACHE_LOCK:
        _SAVE_CACHE.clear()


def _resolve_for_save(host: str, port: int) -> list[str] | None:
    """Addresses for the save-time check, or None when the name does not resolve now."""
    key = (host, port)
    now = time.monotonic()
    with _SAVE_CACHE_LOCK:
        hit = _SAVE_CACHE.get(key)
    if hit is not None and now - hit[0] < SAVE_CACHE_SECONDS:
        return hit[1]
    try:
        addresses: list[str] | None = resolve(host, port)
    except (OSError, UnicodeError):
        addresses = None
    with _SAVE_CACHE_LOCK:
        if len(_SAVE_CACHE) >= SAVE_CACHE_SIZE:
            _SAVE_CACHE.clear()
        _SAVE_CACHE[key] = (now, addresses)
    return addresses


def _check_addresses(
    host: str, port: int, addresses: Iterable[str], allowed: AllowList, kind: OutboundKind
) -> list[str]:
    """The addresses, if each is public or allowed; else OutboundRefused naming the class of
    address only (the address itself is not echoed: the answer would map the internal network)."""
    checked: list[str] = []
    for text in addresses:
        address = ipaddress.ip_address(text.split("%", 1)[0])
        why = internal_kind(address)
        if why is not None and not allowed.covers(address, port):
            raise OutboundRefused(
                f"host {host!r} is not a public address ({why}); internal hosts are reached only "
                f"when {LIST_SETTINGS[kind][1]} names them"
            )
        checked.append(text)
    return checked


def checked_addresses(host: str, port: int, kind: OutboundKind = OutboundKind.AGENT) -> list[str]:
    """Connect-time check: resolve `host` once and return the addresses to connect to, every one
    of them checked against the lists of `kind`. Raises OutboundRefused for an internal address
    those lists do not name, OSError when the name does not resolve. Connect to one of these,
    never to the name."""
    allowed = internal_allow_list(kind)
    literal = literal_address(host)
    addresses = [str(literal)] if literal is not None else resolve(host, port)
    if allowed.names_host(host, port):
        return addresses
    return _check_addresses(host, port, addresses, allowed, kind)


# --- the URL checks -------------------------------------------------------------------------------


def validate_outbound_url(
    url: str,
    *,
    schemes: Mapping[str, int],
    what: str = "URL",
    credentials: bool = False,
    query: bool = False,
    resolve: bool = True,
    kind: OutboundKind = OutboundKind.AGENT,
) -> str:
    """Save-time check of an outbound URL of `kind`; returns it stripped, or raises InvalidInput
    (or its OutboundRefused) saying what is wrong.

    `schemes` maps each accepted scheme to its default port; `credentials` and `query` allow a
    user:password part and a query string (a broker URL has them, an HTTP endpoint must not).
    With `resolve=False` no name is looked up (literal addresses are still checked): for a
    caller that connects through the connect-time check anyway, or that must not wait on DNS.
    """
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(f"{what} is empty")
    url = url.strip()
    if any(ch.isspace() for ch in url) or len(url) > 500:
        raise InvalidInput(f"{what} {url[:100]!r} is not a valid URL")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidInput(f"{what} {url[:100]!r} is not a valid URL: {exc}") from exc
    if parts.scheme not in schemes:
        raise InvalidInput(f"{what} {url[:100]!r} must use {' or '.join(schemes)}")
    if not parts.hostname:
        raise InvalidInput(f"{what} {url[:100]!r} has no host")
    if not credentials and (parts.username or parts.password):
        raise InvalidInput(f"{what} must not carry credentials; use the secret header")
    if not query and (parts.query or parts.fragment):
        raise InvalidInput(f"{what} must not have a query or fragment")
    host = _normal_host(parts.hostname)
    port = port or schemes[parts.scheme]
    restricted, _ = _host_lists(kind)
    if restricted:
        host_port = f"{host}:{parts.port}" if parts.port else host
        if host not in restricted and host_port not in restricted:
            raise InvalidInput(
                f"{what} host {host!r} is not in {LIST_SETTINGS[kind][0]} ({', '.join(restricted)})"
            )
    allowed = internal_allow_list(kind)
    if allowed.names_host(host, port):
        return url
    literal = literal_address(host)
    if literal is not None:
        _check_addresses(host, port, [str(literal)], allowed, kind)
    elif resolve:
        addresses = _resolve_for_save(host, port)
        if addresses is not None:
            _check_addresses(host, port, addresses, allowed, kind)
    return url


def validate_endpoint_url(url: str, *, resolve: bool = True, kind: OutboundKind = OutboundKind.AGENT) -> str:
    """An HTTP(S) URL the service may call, of `kind` (an agent endpoint unless told), without a
    trailing slash; see validate_outbound_url. The HTTP agent and the outbox pass resolve=False:
    their transport checks every connection."""
    checked = validate_outbound_url(url, schemes=HTTP_SCHEMES, what=_WHAT[kind], resolve=resolve, kind=kind)
    return checked.rstrip("/")


def validate_callback_url(url: str, *, resolve: bool = False) -> str:
    """A job's completion callback (any submitter sets one): the callback lists, and by default
    no name lookup, so that a submission never waits on a name server (inside its transaction);
    a literal internal address is still refused, and the connection is checked when the outbox
    sends (`checked_addresses(..., OutboundKind.CALLBACK)`)."""
    return validate_endpoint_url(url, resolve=resolve, kind=OutboundKind.CALLBACK)


def validate_webhook_url(url: str, *, resolve: bool = True) -> str:
    """An alert subscription's webhook: the webhook lists; the host is looked up when saved (an
    administrator's edit, outside any job's transaction) unless the caller says not to."""
    return validate_endpoint_url(url, resolve=resolve, kind=OutboundKind.WEBHOOK)


def same_origin(a: str, b: str) -> bool:
    """Whether two saved URLs (HTTP or broker) have one origin: scheme, host and port, the
    default port of the scheme counting as written."""

    def origin(url: str) -> tuple[str, str, int | None]:
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            port = None
        default = {**HTTP_SCHEMES, **BROKER_SCHEMES}.get(parts.scheme)
        return parts.scheme, _normal_host(parts.hostname or ""), port or default

    return origin(a) == origin(b)


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


# --- queue pools: brokers and queue names -----------------------------------------------------

#: Broker URL schemes a queue pool's endpoint may use (kombu transports), with default ports.
BROKER_SCHEMES: Mapping[str, int] = {"redis": 6379, "rediss": 6379, "amqp": 5672, "amqps": 5671}
#: A queue name: what Redis and AMQP both accept without quoting.
QUEUE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")


def validate_broker_url(url: str, *, resolve: bool = True) -> str:
    """A queue pool's endpoint: redis://, rediss://, amqp:// or amqps:// with a host (and for Redis
    a database number), through the outbound-URL guard, and no credentials in the URL (they go
    in the endpoint's secret, never shown)."""
    checked = validate_outbound_url(url, schemes=BROKER_SCHEMES, what="broker URL", resolve=resolve)
    parts = urlsplit(checked)
    if parts.scheme.startswith("redis") and parts.path not in ("", "/") and not parts.path[1:].isdigit():
        raise InvalidInput(
            f"broker URL {checked[:100]!r}: a Redis database is a number (redis://host:6379/0)"
        )
    return checked.rstrip("/") if parts.path in ("", "/") else checked


def pinned_broker_url(url: str) -> str:
    """Connect-time check of a broker URL (already validated): resolve its host once, refuse an
    internal address the allow-lists do not name (OutboundRefused), and for the plain schemes
    return the URL with the checked address in place of the name, so the connection goes where
    the check looked. TLS schemes keep the name: the certificate is checked against it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or BROKER_SCHEMES.get(parts.scheme, 0)
    addresses = checked_addresses(host, port)
    if parts.scheme in ("rediss", "amqps") or not addresses:
        return url
    address = addresses[0]
    shown = f"[{address}]" if ":" in address else address
    return parts._replace(netloc=f"{shown}:{port}").geturl()


def validate_queue_name(name: str) -> str:
    """A request, compensation or status queue of a queue pool's step."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name.strip()):
        raise InvalidInput(
            f"queue name {str(name)[:100]!r} must be 1-200 letters, digits, '.', '_', ':' or '-'"
        )
    return name.strip()


# --- python agents ----------------------------------------------------------------------------


def python_agent_allowed(path: str) -> bool:
    """Whether SAS_PYTHON_AGENTS registers the callable `path`: named exactly, or by an entry
    `module.*` when `path` is a public function defined in that module itself (`obj.__module__`
    is the module): what the module merely imports (`from os import system`) is not registered
    by its wildcard. The wildcard's case imports the module to look."""
    module, _, name = path.rpartition(".")
    for entry in sas_settings.python_agents:
        if entry == path:
            return True
        if entry.endswith(".*") and module == entry[:-2] and _defined_in(module, name):
            return True
    return False


def _defined_in(module: str, name: str) -> bool:
    """Whether `module.name` is a public function whose own module is `module`."""
    if not name or name.startswith("_"):
        return False
    try:
        obj = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return False
    return inspect.isfunction(obj) and getattr(obj, "__module__", None) == module


def validate_python_agent(path: str) -> str:
    """A python step's callable: a dotted path registered in SAS_PYTHON_AGENTS. Checked when a
    workflow is saved and again when the call is made."""
    path = validate_operation_path(path, http=False)
    if not python_agent_allowed(path):
        raise InvalidInput(
            f"{path!r} is not a registered python agent: add it to the setting SAS_PYTHON_AGENTS"
        )
    return path


#: Header names an endpoint's secret header may not take (compared without case): those that
#: frame or route the request (a secret `Host` or `Content-Length` would change where or what
#: is sent), hop-by-hop ones, and those the HTTP agent sets itself (`Idempotency-Key`,
#: `Content-Type`, `Accept` and every `X-SAS-` header), which a secret must not replace.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "expect",
        "proxy-connection",
        "content-type",
        "content-encoding",
        "accept",
        "idempotency-key",
    }
)
RESERVED_HEADER_PREFIXES = ("x-sas-", "proxy-")
#: An HTTP field name (RFC 9110 token), limited to what header names use in practice.
HEADER_NAME = re.compile(r"^[A-Za-z0-9-]{1,100}$")


def reserved_header_name(name: str) -> bool:
    """Whether the service sets or frames header `name` itself (RESERVED_HEADERS, `X-SAS-*`,
    `Proxy-*`): no endpoint secret may be sent under it."""
    lowered = name.strip().lower()
    return lowered in RESERVED_HEADERS or lowered.startswith(RESERVED_HEADER_PREFIXES)


def validate_secret_header_name(name: str) -> str:
    """The name of an HTTP endpoint's secret header: an HTTP field name that is not reserved
    (RESERVED_HEADERS, `X-SAS-*`, `Proxy-*`). Returns it stripped; raises InvalidInput."""
    name = name.strip()
    if not HEADER_NAME.match(name):
        raise InvalidInput("secret_header_name must be an HTTP header name (letters, digits and '-')")
    if reserved_header_name(name):
        raise InvalidInput(
            f"secret_header_name {name!r} is reserved: the service sets or frames it itself; "
            "use a header such as Authorization or X-Api-Key"
        )
    return name


#: An HTTP field value as RFC 9110 (section 5.5) has it, limited to ASCII (new fields SHOULD be):
#: visible characters, with spaces and tabs only between them.
FIELD_VALUE = re.compile(r"^(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?$")


def valid_field_value(value: str) -> bool:
    """Whether `value` may be sent as an HTTP header value: a request built with anything else is
    refused by the HTTP library, whose error would quote the value (a secret)."""
    return bool(FIELD_VALUE.match(value))
