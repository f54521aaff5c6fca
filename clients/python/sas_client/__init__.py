"""A client for the Scheduler Agent Supervisor's REST API: `Client` (the facade: idempotent
submissions, batches, pages followed, waits, retries) over `sas_client.openapi` (generated from
the service's OpenAPI schema by openapi-python-client), its asyncio twin `AsyncClient` (answering
with the generated models), and the `sas` command (sas_client.cli)."""

from sas_client.aio import AsyncClient
from sas_client.client import (
    SETTLED,
    BatchItem,
    BatchResult,
    Client,
    SasInsecureURLWarning,
    SasWaitTimeout,
    new_key,
)
from sas_client.errors import FieldError, SasApiError, SasConnectionError, SasError
from sas_client.transport import AsyncRetryTransport, RetryEvent, RetryPolicy, RetryTransport

__all__ = [
    "SETTLED",
    "AsyncClient",
    "AsyncRetryTransport",
    "BatchItem",
    "BatchResult",
    "Client",
    "FieldError",
    "RetryEvent",
    "RetryPolicy",
    "RetryTransport",
    "SasApiError",
    "SasConnectionError",
    "SasError",
    "SasInsecureURLWarning",
    "SasWaitTimeout",
    "new_key",
]
