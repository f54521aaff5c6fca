from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.paginated_token_list import PaginatedTokenList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    user: str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["page"] = page

    params["page_size"] = page_size

    params["user"] = user

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/tokens/",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | PaginatedTokenList | None:
    if response.status_code == 200:
        response_200 = PaginatedTokenList.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | PaginatedTokenList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    user: str | Unset = UNSET,
) -> Response[Error | PaginatedTokenList]:
    """Your API tokens (an administrator: anyone's, with ?user=)

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Args:
        page (int | Unset):
        page_size (int | Unset):
        user (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedTokenList]
    """

    kwargs = _get_kwargs(
        page=page,
        page_size=page_size,
        user=user,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    user: str | Unset = UNSET,
) -> Error | PaginatedTokenList | None:
    """Your API tokens (an administrator: anyone's, with ?user=)

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Args:
        page (int | Unset):
        page_size (int | Unset):
        user (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedTokenList
    """

    return sync_detailed(
        client=client,
        page=page,
        page_size=page_size,
        user=user,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    user: str | Unset = UNSET,
) -> Response[Error | PaginatedTokenList]:
    """Your API tokens (an administrator: anyone's, with ?user=)

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Args:
        page (int | Unset):
        page_size (int | Unset):
        user (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedTokenList]
    """

    kwargs = _get_kwargs(
        page=page,
        page_size=page_size,
        user=user,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    user: str | Unset = UNSET,
) -> Error | PaginatedTokenList | None:
    """Your API tokens (an administrator: anyone's, with ?user=)

     The API's views: JSON bodies only (JSONDocumentParser), the schema inspector above, pages of
    `Pagination` (or of `CursorOrNumberPagination` where a view says so, with its
    `cursor_ordering`).

    Args:
        page (int | Unset):
        page_size (int | Unset):
        user (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedTokenList
    """

    return (
        await asyncio_detailed(
            client=client,
            page=page,
            page_size=page_size,
            user=user,
        )
    ).parsed
