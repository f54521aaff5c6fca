"""httpx clients whose every connection goes through the outbound-URL guard's connect-time check.

httpx resolves a host name when it opens a connection. Here the transport's network backend does
it instead: it resolves once, checks every address (`agents.validation.checked_addresses`), and
opens the TCP connection to one of those addresses. The request keeps its URL, so the Host header,
TLS's server name and certificate check still use the host name; only the address is pinned.
Connections are pooled by httpx as before (keep-alive between calls), and a reused connection
costs no new check: it already goes to a checked address.

A refused destination raises `agents.validation.OutboundRefused` out of the request (nothing was
sent); a name that does not resolve is httpx's ConnectError, as before.

**A whole request has a deadline.** httpx's timeouts bound each socket operation, so a remote
that answers one byte at a time holds a request forever. A request made inside `with
deadline(seconds):` ends at that wall-clock deadline: every connection the backend makes (TCP
connect, TLS handshake) and every read and write on it is given at most the time left, and once
none is left raises httpcore's ConnectTimeout, ReadTimeout or WriteTimeout (httpx's timeouts).
The deadline belongs to the request, not to the connection (a kept-alive connection serves the
next request under that request's deadline): it is a context variable, so each thread has its
own.

**No delayed-ACK stall on kept-alive connections.** A remote that leaves Nagle's algorithm on
and writes an answer's headers and body in two segments (Python's `http.server` does; many small
services do) holds the body until the headers are acknowledged, and the client, having nothing to
send, delays that acknowledgement: some 40 ms per call on a kept-alive connection, against under a
millisecond on a new one. On Linux every stream here turns TCP_QUICKACK on after each write and
read (the kernel drops the mode again as it sees fit, so once is not enough): the headers are
acknowledged at once and the body follows. One `setsockopt` per operation; elsewhere nothing.

**An answer is read capped.** `read_capped` reads the raw body and decodes gzip and deflate itself,
a bounded piece at a time, so the cap counts decoded bytes and a compression bomb is refused
having allocated about the cap, never its expansion. The clients ask only for those two
encodings; an answer in another one is read as it is.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import os
import socket
import ssl
import threading
import time
import typing
import zlib
from collections.abc import Callable, Iterator

import httpcore
import httpx

from agents.validation import OutboundKind, checked_addresses, literal_address, resolve
from sas_project.conf import sas_settings

#: The encodings `read_capped` decodes, asked for by every outbound client.
ACCEPT_ENCODING = "gzip, deflate"
#: Largest piece a decoder yields at once.
_PIECE = 64 * 1024

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("sas_egress_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Requests made in this block (in this thread) end `seconds` from now at the latest."""
    token = _deadline.set(time.monotonic() + max(seconds, 0.0))
    try:
        yield
    finally:
        _deadline.reset(token)


def _bounded(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` cut to the time left to the current deadline; raises `expired` when none is left."""
    end = _deadline.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


#: Linux's option (None elsewhere): acknowledge what arrives at once rather than after a delay.
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)


def quick_ack(sock: typing.Any) -> None:
    """Put `sock` in quick-ACK mode (Linux), so that a remote whose Nagle's algorithm waits for
    our acknowledgement is not kept waiting for the delayed one."""
    if _QUICKACK is not None and isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the current request's deadline, and that
    acknowledges what it receives at once (module docstring)."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream
        self._socket = stream.get_extra_info("socket")

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))
        quick_ack(self._socket)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._write(buffer, timeout)
        # Set after the request is out, before its answer arrives: the kernel may have left the
        # mode while the connection sat idle or as it sent.
        quick_ack(self._socket)

    def _write(self, buffer: bytes, timeout: float | None) -> None:
        sock = self._stream.get_extra_info("socket")
        if not isinstance(sock, socket.socket):
            self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))
            return
        # httpcore's own loop gives every send() the whole timeout: a remote reading one byte at
        # a time would stretch it without end, so each send gets only the time left.
        view = memoryview(buffer)
        while view:
            left = _bounded(timeout, httpcore.WriteTimeout)
            try:
                sock.settimeout(left)
                sent = sock.send(view)
            except TimeoutError as exc:
                raise httpcore.WriteTimeout(str(exc)) from exc
            except OSError as exc:
                raise httpcore.WriteError(str(exc)) from exc
            view = view[sent:]

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        # The handshake as a whole is bounded by the socket's timeout (the ssl module keeps one
        # deadline across its reads and writes), given here as the time left.
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)


class Resolvers:
    """The name lookups of one kind of destination (agents, callbacks, webhooks), when a deadline
    bounds them. The system resolver has no timeout of its own and a lookup cannot be stopped
    once it runs, so:

    - at most SAS_RESOLVER_THREADS lookups run at once per kind: names that hang hold those
      threads, never a caller's (it waits at most until its deadline, then its request fails with
      a ConnectTimeout) nor another kind's lookups (callbacks to a dead name server never hold an
      alert's lookup or an agent's);
    - a name is looked up once at a time: callers asking for a name already being looked up wait
      for that lookup, so a thousand messages to one hanging name hold one thread;
    - a lookup whose callers have all given up before it started is cancelled (it never runs),
      and the lookups waiting are bounded (`QUEUE_PER_THREAD` per thread): past that a request
      fails at once, as a timeout.
    """

    QUEUE_PER_THREAD = 16

    def __init__(self, kind: OutboundKind, threads: int) -> None:
        self.kind = kind
        self.threads = threads
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._waiting: collections.deque[_Lookup] = collections.deque()
        self._lookups: dict[tuple[str, int], _Lookup] = {}
        self._workers = 0
        self._idle = 0
        #: Lookups started and lookups cancelled before they started, since this pool was made.
        self.started = 0
        self.cancelled = 0

    def running(self) -> int:
        with self._lock:
            return self._workers - self._idle

    def addresses(self, host: str, port: int, limit: float) -> list[str]:
        """`checked_addresses(host, port, kind)`, waited for at most `limit` seconds."""
        with self._lock:
            lookup = self._lookups.get((host, port))
            if lookup is None:
                if len(self._waiting) >= self.threads * self.QUEUE_PER_THREAD:
                    raise httpcore.ConnectTimeout(f"{host}: too many name lookups waiting")
                lookup = self._lookups[(host, port)] = _Lookup(host, port)
                self._waiting.append(lookup)
                if self._idle:
                    self._ready.notify()
                elif self._workers < self.threads:
                    self._workers += 1
                    threading.Thread(target=self._work, name=f"sas-resolve-{self.kind}", daemon=True).start()
            lookup.waiters += 1
        if not lookup.done.wait(limit):
            with self._lock:
                lookup.waiters -= 1
                if not lookup.waiters and not lookup.started:
                    self._waiting.remove(lookup)
                    del self._lookups[(host, port)]
                    self.cancelled += 1
            raise httpcore.ConnectTimeout(f"{host}: no name resolution before the request's deadline")
        if lookup.error is not None:
            raise lookup.error
        return lookup.result

    def _work(self) -> None:
        while True:
            with self._lock:
                while not self._waiting:
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                lookup = self._waiting.popleft()
                lookup.started = True
                self.started += 1
            try:
                lookup.result = checked_addresses(lookup.host, lookup.port, self.kind)
            except Exception as exc:  # noqa: BLE001 - handed to the callers, who raise it
                lookup.error = exc
            finally:
                with self._lock:
                    del self._lookups[(lookup.host, lookup.port)]
                lookup.done.set()


class _Lookup:
    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.waiters = 0
        self.started = False
        self.done = threading.Event()
        self.result: list[str] = []
        self.error: Exception | None = None


_resolvers: dict[OutboundKind, Resolvers] = {}
_resolvers_pid = 0
_resolvers_lock = threading.Lock()


def resolvers(kind: OutboundKind) -> Resolvers:
    """This process's lookups of `kind` (never shared across a fork; remade when
    SAS_RESOLVER_THREADS changes, the hung lookups of the former left to end in their threads)."""
    global _resolvers_pid
    threads = sas_settings.resolver_threads
    with _resolvers_lock:
        if _resolvers_pid != os.getpid():
            _resolvers.clear()
            _resolvers_pid = os.getpid()
        pool = _resolvers.get(kind)
        if pool is None or pool.threads != threads:
            pool = _resolvers[kind] = Resolvers(kind, threads)
        return pool


def _checked_within(
    host: str,
    port: int,
    kind: OutboundKind,
    limit: float | None,
    check: Callable[[str, int, OutboundKind], list[str]] = checked_addresses,
) -> list[str]:
    """`checked_addresses` (or `check`), given at most `limit` seconds (None: unbounded) to resolve."""
    if limit is None or literal_address(host) is not None:
        return check(host, port, kind)
    if check is not checked_addresses:
        # The service's own origin (the canary's URL) is not a name a user gave: looked up as it
        # comes, outside the kinds' bounded lookups.
        return check(host, port, kind)
    return resolvers(kind).addresses(host, port, limit)


def _own_addresses(host: str, port: int, kind: OutboundKind) -> list[str]:
    """The addresses of the service's own origin (the canary's URL: SAS_CANARY_URL, else
    SAS_PUBLIC_URL), which the lists need not name."""
    literal = literal_address(host)
    return [str(literal)] if literal is not None else resolve(host, port)


class CheckedBackend(httpcore.SyncBackend):
    """httpcore's socket backend, connecting only to addresses the guard checked for `kind`, or
    to `own`: the (host, port) of the service's own origin, for a client that the service uses to
    call itself only (the canary's calls, agents.http)."""

    def __init__(self, kind: OutboundKind = OutboundKind.AGENT, own: tuple[str, int] | None = None) -> None:
        self.kind = kind
        self.own = own

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        check = _own_addresses if self.own == (host.lower(), port) else checked_addresses
        try:
            addresses = _checked_within(
                host, port, self.kind, _bounded(timeout, httpcore.ConnectTimeout), check=check
            )
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: {exc}") from exc
        error: httpcore.ConnectError | None = None
        for address in addresses:
            bounded = _bounded(timeout, httpcore.ConnectTimeout)
            try:
                stream = super().connect_tcp(address, port, bounded, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
                continue
            return DeadlineStream(stream)
        raise error or httpcore.ConnectError(f"{host}: no address to connect to")


_ssl_context: ssl.SSLContext | None = None


def ssl_context() -> ssl.SSLContext:
    """The verifying TLS context every outbound client of this process shares, and the
    processes forked from it once it exists: building one loads the trusted certificates, some
    20 ms of CPU (several times that on a busy machine), which a worker paid for each client
    (twice: httpx's own pool's and ours) at its first call after every recycle. `qcluster`
    builds it before it forks its workers."""
    global _ssl_context
    if _ssl_context is None:
        _ssl_context = httpx.create_ssl_context(verify=True, trust_env=False)
    return _ssl_context


class CheckedTransport(httpx.HTTPTransport):
    """httpx's transport with the checked backend. httpx builds its connection pool without a
    way to choose the backend, so the pool is rebuilt with the same arguments and ours."""

    def __init__(
        self,
        *,
        limits: httpx.Limits | None = None,
        verify: bool = True,
        kind: OutboundKind = OutboundKind.AGENT,
        own: tuple[str, int] | None = None,
    ) -> None:
        limits = limits or httpx.Limits()
        context = ssl_context() if verify else httpx.create_ssl_context(verify=False, trust_env=False)
        super().__init__(verify=context, trust_env=False, limits=limits)
        self._pool = httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=CheckedBackend(kind, own),
        )


def outbound_client(
    *,
    limits: httpx.Limits | None = None,
    kind: OutboundKind = OutboundKind.AGENT,
    own: tuple[str, int] | None = None,
    **kwargs: typing.Any,
) -> httpx.Client:
    """An httpx client for untrusted destinations of `kind`: connections checked against that
    kind's lists (except `own`, the service's own host and port), no redirects followed, no proxy
    or certificate settings taken from the environment, only the encodings `read_capped` decodes
    asked for."""
    client = httpx.Client(
        transport=CheckedTransport(limits=limits, kind=kind, own=own),
        follow_redirects=False,
        trust_env=False,
        **kwargs,
    )
    client.headers["Accept-Encoding"] = ACCEPT_ENCODING
    return client


class TooLarge(Exception):
    """The answer's body, decoded, is larger than the cap."""


class _Inflate:
    """One gzip or deflate layer, decoded a bounded piece at a time."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        # gzip: the gzip wrapper; deflate: the zlib wrapper, or raw deflate as some servers send
        # it (decided on the first bytes, as httpx does).
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
        self._started = encoding == "gzip"

    def feed(self, data: bytes) -> Iterator[bytes]:
        if not self._started and data:
            self._started = True
            try:
                yield from self._pieces(data)
            except zlib.error:
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                yield from self._pieces(data)
            return
        yield from self._pieces(data)

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        while not self._z.eof:
            piece = self._z.decompress(data, _PIECE)
            data = self._z.unconsumed_tail
            if piece:
                yield piece
            # A full piece may leave output inside the decoder even when the input is used up.
            if not data and len(piece) < _PIECE:
                return


def _decoders(response: httpx.Response) -> list[_Inflate] | None:
    """The decoders of the answer's Content-Encoding, outermost last; None to read it as it is."""
    names = [
        name.strip().lower()
        for name in response.headers.get("content-encoding", "").split(",")
        if name.strip().lower() not in ("", "identity")
    ]
    if not names or any(name not in ("gzip", "deflate") for name in names):
        return None
    return [_Inflate(name) for name in names]


def _through(layers: list[_Inflate], data: bytes, *, end: bool = False) -> Iterator[bytes]:
    """`data` decoded through `layers` (the last applied first), a bounded piece at a time;
    `end` drains what the decoders still hold."""
    if not layers:
        if data:
            yield data
        return
    *inner, outer = layers
    for piece in outer.feed(data):
        yield from _through(inner, piece)
    if end and inner:
        yield from _through(inner, b"", end=True)


def read_capped(response: httpx.Response, limit: int) -> bytes:
    """The answer's body, decoded, read from a streamed response; raises `TooLarge` as soon as
    it passes `limit` bytes (encoded or decoded), having held about `limit` at most. A body
    that does not decode raises httpx.DecodingError, as httpx's own reading would."""
    layers = _decoders(response)
    chunks: list[bytes] = []
    size = 0
    received = 0

    def take(pieces: Iterator[bytes]) -> None:
        nonlocal size
        for piece in pieces:
            size += len(piece)
            if size > limit:
                raise TooLarge
            chunks.append(piece)

    try:
        for raw in response.iter_raw():
            received += len(raw)
            if received > limit:
                raise TooLarge
            take(_through(layers or [], raw))
        take(_through(layers or [], b"", end=True))
    except zlib.error as exc:
        raise httpx.DecodingError(f"the answer does not decode: {exc}") from exc
    return b"".join(chunks)
