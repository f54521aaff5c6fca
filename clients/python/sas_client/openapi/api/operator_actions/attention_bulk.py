from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.bulk_action_request import BulkActionRequest
from ...models.bulk_result import BulkResult
from ...models.error import Error
from ...types import UNSET, Response, Unset


def _get_kwargs(
    *,
    body: BulkActionRequest,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/attention/bulk/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> BulkResult | Error | None:
    if response.status_code == 200:
        response_200 = BulkResult.from_dict(response.json())

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
) -> Response[BulkResult | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: BulkActionRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[BulkResult | Error]:
    """Retry, compensate or cancel many at once, or say what would happen (dry_run)

     Each item is done (or refused) on its own: one refusal does not stop the others. Compensate and
    cancel act on each step's job, once per job.

    Args:
        idempotency_key (str | Unset):
        body (BulkActionRequest): Refuses keys it does not declare. Read-only fields are declared,
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
        Response[BulkResult | Error]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    *,
    client: AuthenticatedClient,
    body: BulkActionRequest,
    idempotency_key: str | Unset = UNSET,
) -> BulkResult | Error | None:
    """Retry, compensate or cancel many at once, or say what would happen (dry_run)

     Each item is done (or refused) on its own: one refusal does not stop the others. Compensate and
    cancel act on each step's job, once per job.

    Args:
        idempotency_key (str | Unset):
        body (BulkActionRequest): Refuses keys it does not declare. Read-only fields are declared,
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
        BulkResult | Error
    """

    return sync_detailed(
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: BulkActionRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[BulkResult | Error]:
    """Retry, compensate or cancel many at once, or say what would happen (dry_run)

     Each item is done (or refused) on its own: one refusal does not stop the others. Compensate and
    cancel act on each step's job, once per job.

    Args:
        idempotency_key (str | Unset):
        body (BulkActionRequest): Refuses keys it does not declare. Read-only fields are declared,
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
        Response[BulkResult | Error]
    """

    kwargs = _get_kwargs(
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: BulkActionRequest,
    idempotency_key: str | Unset = UNSET,
) -> BulkResult | Error | None:
    """Retry, compensate or cancel many at once, or say what would happen (dry_run)

     Each item is done (or refused) on its own: one refusal does not stop the others. Compensate and
    cancel act on each step's job, once per job.

    Args:
        idempotency_key (str | Unset):
        body (BulkActionRequest): Refuses keys it does not declare. Read-only fields are declared,
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
        BulkResult | Error
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
