import datetime
from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.jobs_list_status import JobsListStatus
from ...models.paginated_job_summary_list import PaginatedJobSummaryList
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    business_key: str | Unset = UNSET,
    created_after: datetime.datetime | Unset = UNSET,
    created_before: datetime.datetime | Unset = UNSET,
    cursor: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    status: JobsListStatus | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> dict[str, Any]:

    params: dict[str, Any] = {}

    params["business_key"] = business_key

    json_created_after: str | Unset = UNSET
    if not isinstance(created_after, Unset):
        json_created_after = created_after.isoformat()
    params["created_after"] = json_created_after

    json_created_before: str | Unset = UNSET
    if not isinstance(created_before, Unset):
        json_created_before = created_before.isoformat()
    params["created_before"] = json_created_before

    params["cursor"] = cursor

    params["idempotency_key"] = idempotency_key

    params["page"] = page

    params["page_size"] = page_size

    json_status: str | Unset = UNSET
    if not isinstance(status, Unset):
        json_status = status.value

    params["status"] = json_status

    params["workflow"] = workflow

    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}

    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/api/v1/jobs/",
        "params": params,
    }

    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | PaginatedJobSummaryList | None:
    if response.status_code == 200:
        response_200 = PaginatedJobSummaryList.from_dict(response.json())

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
) -> Response[Error | PaginatedJobSummaryList]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    business_key: str | Unset = UNSET,
    created_after: datetime.datetime | Unset = UNSET,
    created_before: datetime.datetime | Unset = UNSET,
    cursor: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    status: JobsListStatus | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Response[Error | PaginatedJobSummaryList]:
    """List jobs, newest first

     Operators see every job; submitters see the jobs they submitted.

    Args:
        business_key (str | Unset):
        created_after (datetime.datetime | Unset):
        created_before (datetime.datetime | Unset):
        cursor (str | Unset):
        idempotency_key (str | Unset):
        page (int | Unset):
        page_size (int | Unset):
        status (JobsListStatus | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedJobSummaryList]
    """

    kwargs = _get_kwargs(
        business_key=business_key,
        created_after=created_after,
        created_before=created_before,
        cursor=cursor,
        idempotency_key=idempotency_key,
        page=page,
        page_size=page_size,
        status=status,
        workflow=workflow,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    business_key: str | Unset = UNSET,
    created_after: datetime.datetime | Unset = UNSET,
    created_before: datetime.datetime | Unset = UNSET,
    cursor: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    status: JobsListStatus | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Error | PaginatedJobSummaryList | None:
    """List jobs, newest first

     Operators see every job; submitters see the jobs they submitted.

    Args:
        business_key (str | Unset):
        created_after (datetime.datetime | Unset):
        created_before (datetime.datetime | Unset):
        cursor (str | Unset):
        idempotency_key (str | Unset):
        page (int | Unset):
        page_size (int | Unset):
        status (JobsListStatus | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedJobSummaryList
    """

    return sync_detailed(
        client=client,
        business_key=business_key,
        created_after=created_after,
        created_before=created_before,
        cursor=cursor,
        idempotency_key=idempotency_key,
        page=page,
        page_size=page_size,
        status=status,
        workflow=workflow,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    business_key: str | Unset = UNSET,
    created_after: datetime.datetime | Unset = UNSET,
    created_before: datetime.datetime | Unset = UNSET,
    cursor: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    status: JobsListStatus | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Response[Error | PaginatedJobSummaryList]:
    """List jobs, newest first

     Operators see every job; submitters see the jobs they submitted.

    Args:
        business_key (str | Unset):
        created_after (datetime.datetime | Unset):
        created_before (datetime.datetime | Unset):
        cursor (str | Unset):
        idempotency_key (str | Unset):
        page (int | Unset):
        page_size (int | Unset):
        status (JobsListStatus | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | PaginatedJobSummaryList]
    """

    kwargs = _get_kwargs(
        business_key=business_key,
        created_after=created_after,
        created_before=created_before,
        cursor=cursor,
        idempotency_key=idempotency_key,
        page=page,
        page_size=page_size,
        status=status,
        workflow=workflow,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    business_key: str | Unset = UNSET,
    created_after: datetime.datetime | Unset = UNSET,
    created_before: datetime.datetime | Unset = UNSET,
    cursor: str | Unset = UNSET,
    idempotency_key: str | Unset = UNSET,
    page: int | Unset = UNSET,
    page_size: int | Unset = UNSET,
    status: JobsListStatus | Unset = UNSET,
    workflow: str | Unset = UNSET,
) -> Error | PaginatedJobSummaryList | None:
    """List jobs, newest first

     Operators see every job; submitters see the jobs they submitted.

    Args:
        business_key (str | Unset):
        created_after (datetime.datetime | Unset):
        created_before (datetime.datetime | Unset):
        cursor (str | Unset):
        idempotency_key (str | Unset):
        page (int | Unset):
        page_size (int | Unset):
        status (JobsListStatus | Unset):
        workflow (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | PaginatedJobSummaryList
    """

    return (
        await asyncio_detailed(
            client=client,
            business_key=business_key,
            created_after=created_after,
            created_before=created_before,
            cursor=cursor,
            idempotency_key=idempotency_key,
            page=page,
            page_size=page_size,
            status=status,
            workflow=workflow,
        )
    ).parsed
