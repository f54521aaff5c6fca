"""A client library for accessing Scheduler Agent Supervisor API"""

from .client import AuthenticatedClient, Client

__all__ = (
    "AuthenticatedClient",
    "Client",
)
