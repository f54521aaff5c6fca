"""httpx clients whose every connection goes through the outbound-URL guard's connect-time check.

httpx resolves a host name when it opens a connection. Here the transport's network backend does
it instead: it resolves once, checks every address (`agents.validation.checked_addresses`), and
opens the TCP connection to one of those addresses. The request keeps its URL, so the Host header,
TLS's server name and certificate check still use the host name; only the address is pinned.
Connections are pooled by httpx as before (keep-alive between calls), and a reused connection
costs no new check: it already goes to a checked address.

A refused destination raises `agents.validation.OutboundRefused` out of the request (nothing was
sent); a name that does not resolve is httpx's ConnectError, as before.
"""

from __future__ import annotations

import typing

import httpcore
import httpx

from agents.validation import checked_addresses


class CheckedBackend(httpcore.SyncBackend):
    """httpcore's socket backend, connecting only to addresses the guard checked."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = checked_addresses(host, port)
        except OSError as exc:
            raise httpcore.ConnectError(f"{host}: {exc}") from exc
        error: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError(f"{host}: no address to connect to")


class CheckedTransport(httpx.HTTPTransport):
    """httpx's transport with the checked backend. httpx builds its connection pool without a
    way to choose the backend, so the pool is rebuilt with the same arguments and ours."""

    def __init__(self, *, limits: httpx.Limits | None = None, verify: bool = True) -> None:
        limits = limits or httpx.Limits()
        super().__init__(verify=verify, trust_env=False, limits=limits)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify, trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=CheckedBackend(),
        )


def outbound_client(*, limits: httpx.Limits | None = None, **kwargs: typing.Any) -> httpx.Client:
    """An httpx client for untrusted destinations: checked connections, no redirects followed,
    no proxy or certificate settings taken from the environment."""
    return httpx.Client(
        transport=CheckedTransport(limits=limits), follow_redirects=False, trust_env=False, **kwargs
    )
