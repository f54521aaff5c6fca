from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.paginated_attention_item_list import PaginatedAttentionItemList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    older_than_minutes: int | None | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    pool: str | Unset = UNSET,
    step: str | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    json_older_than_minutes: int | None | Unset
    if isinstance(older_than_minutes, Unset):
        json_older_than_minutes = UNSET
    else:
        json_older_than_minutes = older_than_minutes
    params["older_than_minutes"] = json_older_than_minutes

    params["page"] = page

    params["page_size"] = page_size

    params["pool"] = pool

    params["step"] = step

    params["workflow"] = workflow

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/attention/",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | PaginatedAttentionItemList | None:
    if response.status_code == 200:
        response_200 = PaginatedAttentionItemList.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

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
) -> Response[Error | PaginatedAttentionItemList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    older_than_minutes: int | None | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    pool: str | Unset = UNSET,
    step: str | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Response[Error | PaginatedAttentionItemList]:
    """Steps that need an operator, oldest in their state first

     Held steps, unknown outcomes, failed attempts and overdue calls, with why each is listed, as the
    console's Needs attention page shows them.

    Args:
        older_than_minutes (int | None | Unset):
        page (int | Unset):
        page_size (int | Unset):
        pool (str | Unset):
        step (str | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedAttentionItemList]
    """

    kwargs = _get_kwargs(
        older_than_minutes=older_than_minutes,
        page=page,
        page_size=page_size,
        pool=pool,
        step=step,
        workflow=workflow,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    older_than_minutes: int | None | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    pool: str | Unset = UNSET,
    step: str | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Error | PaginatedAttentionItemList | None:
    """Steps that need an operator, oldest in their state first

     Held steps, unknown outcomes, failed attempts and overdue calls, with why each is listed, as the
    console's Needs attention page shows them.

    Args:
        older_than_minutes (int | None | Unset):
        page (int | Unset):
        page_size (int | Unset):
        pool (str | Unset):
        step (str | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedAttentionItemList
    """

    return sync_detailed(
        client=client,
        older_than_minutes=older_than_minutes,
        page=page,
        page_size=page_size,
        pool=pool,
        step=step,
        workflow=workflow,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    older_than_minutes: int | None | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    pool: str | Unset = UNSET,
    step: str | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Response[Error | PaginatedAttentionItemList]:
    """Steps that need an operator, oldest in their state first

     Held steps, unknown outcomes, failed attempts and overdue calls, with why each is listed, as the
    console's Needs attention page shows them.

    Args:
        older_than_minutes (int | None | Unset):
        page (int | Unset):
        page_size (int | Unset):
        pool (str | Unset):
        step (str | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedAttentionItemList]
    """

    kwargs = _get_kwargs(
        older_than_minutes=older_than_minutes,
        page=page,
        page_size=page_size,
        pool=pool,
        step=step,
        workflow=workflow,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    older_than_minutes: int | None | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    pool: str | Unset = UNSET,
    step: str | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Error | PaginatedAttentionItemList | None:
    """Steps that need an operator, oldest in their state first

     Held steps, unknown outcomes, failed attempts and overdue calls, with why each is listed, as the
    console's Needs attention page shows them.

    Args:
        older_than_minutes (int | None | Unset):
        page (int | Unset):
        page_size (int | Unset):
        pool (str | Unset):
        step (str | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedAttentionItemList
    """

    return (
        await asyncio_detailed(
            client=client,
            older_than_minutes=older_than_minutes,
            page=page,
            page_size=page_size,
            pool=pool,
            step=step,
            workflow=workflow,
        )
    ).parsed
