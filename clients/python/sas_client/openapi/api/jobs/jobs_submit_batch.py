from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.job_batch_request import JobBatchRequest
from ...models.job_batch_response import JobBatchResponse
from ...types import Response


def _get_kwargs(
    *,
    body: JobBatchRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/jobs/batch/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | JobBatchResponse | None:
    if response.status_code == 200:
        response_200 = JobBatchResponse.from_dict(response.json())

        return response_200

    if response.status_code == 201:
        response_201 = JobBatchResponse.from_dict(response.json())

        return response_201

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if response.status_code == 422:
        response_422 = Error.from_dict(response.json())

        return response_422

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | JobBatchResponse]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: JobBatchRequest,
) -> Response[Error | JobBatchResponse]:
    """Submit several jobs at once

     Submits up to SAS_MAX_BATCH_JOBS (100) jobs in one transaction: all are created, or none. Each item
    is a single submission's body with its own optional `idempotency_key`; an item whose key was used
    before with the same body answers the job that request made (`created: false`). A malformed request
    is a 400 naming the items' fields; an item refused (an unknown workflow, an input its contract
    refuses, a key used for another request) refuses the batch with the item's `index`. 201 when at
    least one job was created, 200 when every item was a replay.

    Args:
        body (JobBatchRequest): Refuses keys it does not declare. Read-only fields are declared,
            so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | JobBatchResponse]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: JobBatchRequest,
) -> Error | JobBatchResponse | None:
    """Submit several jobs at once

     Submits up to SAS_MAX_BATCH_JOBS (100) jobs in one transaction: all are created, or none. Each item
    is a single submission's body with its own optional `idempotency_key`; an item whose key was used
    before with the same body answers the job that request made (`created: false`). A malformed request
    is a 400 naming the items' fields; an item refused (an unknown workflow, an input its contract
    refuses, a key used for another request) refuses the batch with the item's `index`. 201 when at
    least one job was created, 200 when every item was a replay.

    Args:
        body (JobBatchRequest): Refuses keys it does not declare. Read-only fields are declared,
            so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | JobBatchResponse
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: JobBatchRequest,
) -> Response[Error | JobBatchResponse]:
    """Submit several jobs at once

     Submits up to SAS_MAX_BATCH_JOBS (100) jobs in one transaction: all are created, or none. Each item
    is a single submission's body with its own optional `idempotency_key`; an item whose key was used
    before with the same body answers the job that request made (`created: false`). A malformed request
    is a 400 naming the items' fields; an item refused (an unknown workflow, an input its contract
    refuses, a key used for another request) refuses the batch with the item's `index`. 201 when at
    least one job was created, 200 when every item was a replay.

    Args:
        body (JobBatchRequest): Refuses keys it does not declare. Read-only fields are declared,
            so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | JobBatchResponse]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: JobBatchRequest,
) -> Error | JobBatchResponse | None:
    """Submit several jobs at once

     Submits up to SAS_MAX_BATCH_JOBS (100) jobs in one transaction: all are created, or none. Each item
    is a single submission's body with its own optional `idempotency_key`; an item whose key was used
    before with the same body answers the job that request made (`created: false`). A malformed request
    is a 400 naming the items' fields; an item refused (an unknown workflow, an input its contract
    refuses, a key used for another request) refuses the batch with the item's `index`. 201 when at
    least one job was created, 200 when every item was a replay.

    Args:
        body (JobBatchRequest): Refuses keys it does not declare. Read-only fields are declared,
            so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | JobBatchResponse
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
