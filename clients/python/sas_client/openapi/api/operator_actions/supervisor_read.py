from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.supervisor_status import SupervisorStatus
from ...types import Response


def _get_kwargs() -> dict[str, Any]:

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/supervisor/",
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | SupervisorStatus | None:
    if response.status_code == 200:
        response_200 = SupervisorStatus.from_dict(response.json())

        return response_200

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 404:
        response_404 = Error.from_dict(response.json())

        return response_404

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | SupervisorStatus]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
) -> Response[Error | SupervisorStatus]:
    """The supervisor: who holds the lease, the last scan, and every endpoint's health

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | SupervisorStatus]
    """

    kwargs = _get_kwargs()

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
) -> Error | SupervisorStatus | None:
    """The supervisor: who holds the lease, the last scan, and every endpoint's health

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | SupervisorStatus
    """

    return sync_detailed(
        client=client,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
) -> Response[Error | SupervisorStatus]:
    """The supervisor: who holds the lease, the last scan, and every endpoint's health

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | SupervisorStatus]
    """

    kwargs = _get_kwargs()

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
) -> Error | SupervisorStatus | None:
    """The supervisor: who holds the lease, the last scan, and every endpoint's health

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | SupervisorStatus
    """

    return (
        await asyncio_detailed(
            client=client,
        )
    ).parsed
