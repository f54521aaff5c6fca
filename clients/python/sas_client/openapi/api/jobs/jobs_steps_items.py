from http import HTTPStatus
from typing import Any
from urllib.parse import quote
from uuid import UUID

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.paginated_step_item_list import PaginatedStepItemList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: UUID,
    step_name: str,
    *,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["page"] = page

    params["page_size"] = page_size

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/jobs/{job_id}/steps/{step_name}/items/".format(
            job_id=quote(str(job_id), safe=""),
            step_name=quote(str(step_name), safe=""),
        ),
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | PaginatedStepItemList | None:
    if response.status_code == 200:
        response_200 = PaginatedStepItemList.from_dict(response.json())

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

    if response.status_code == 410:
        response_410 = Error.from_dict(response.json())

        return response_410

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | PaginatedStepItemList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
) -> Response[Error | PaginatedStepItemList]:
    """A fan-out step's items, in list order

     Each item of a step with `for_each`: its `index`, element, `status`, `operation_id` (the step's,
    plus the index or the key `item_key` names), output and undo; in pages.

    Args:
        job_id (UUID):
        step_name (str):
        page (int | Unset):
        page_size (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedStepItemList]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        step_name=step_name,
        page=page,
        page_size=page_size,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
) -> Error | PaginatedStepItemList | None:
    """A fan-out step's items, in list order

     Each item of a step with `for_each`: its `index`, element, `status`, `operation_id` (the step's,
    plus the index or the key `item_key` names), output and undo; in pages.

    Args:
        job_id (UUID):
        step_name (str):
        page (int | Unset):
        page_size (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedStepItemList
    """

    return sync_detailed(
        job_id=job_id,
        step_name=step_name,
        client=client,
        page=page,
        page_size=page_size,
    ).parsed


async def asyncio_detailed(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
) -> Response[Error | PaginatedStepItemList]:
    """A fan-out step's items, in list order

     Each item of a step with `for_each`: its `index`, element, `status`, `operation_id` (the step's,
    plus the index or the key `item_key` names), output and undo; in pages.

    Args:
        job_id (UUID):
        step_name (str):
        page (int | Unset):
        page_size (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedStepItemList]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        step_name=step_name,
        page=page,
        page_size=page_size,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
) -> Error | PaginatedStepItemList | None:
    """A fan-out step's items, in list order

     Each item of a step with `for_each`: its `index`, element, `status`, `operation_id` (the step's,
    plus the index or the key `item_key` names), output and undo; in pages.

    Args:
        job_id (UUID):
        step_name (str):
        page (int | Unset):
        page_size (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedStepItemList
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            step_name=step_name,
            client=client,
            page=page,
            page_size=page_size,
        )
    ).parsed
