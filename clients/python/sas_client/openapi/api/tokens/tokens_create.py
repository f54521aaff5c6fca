from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.token_create_request import TokenCreateRequest
from ...models.token_created import TokenCreated
from ...types import Response


def _get_kwargs(
    *,
    body: TokenCreateRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/tokens/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | TokenCreated | None:
    if response.status_code == 201:
        response_201 = TokenCreated.from_dict(response.json())

        return response_201

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[Error | TokenCreated]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: TokenCreateRequest,
) -> Response[Error | TokenCreated]:
    """Make an API token for yourself (the key is in this answer only)

     The new token acts as you, with your roles. Its key is shown in this answer and never again (only
    its digest is stored); lose it and make another. The creation is recorded with your user in the
    admin log.

    Args:
        body (TokenCreateRequest): Refuses keys it does not declare. Read-only fields are
            declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | TokenCreated]
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
    body: TokenCreateRequest,
) -> Error | TokenCreated | None:
    """Make an API token for yourself (the key is in this answer only)

     The new token acts as you, with your roles. Its key is shown in this answer and never again (only
    its digest is stored); lose it and make another. The creation is recorded with your user in the
    admin log.

    Args:
        body (TokenCreateRequest): Refuses keys it does not declare. Read-only fields are
            declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | TokenCreated
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: TokenCreateRequest,
) -> Response[Error | TokenCreated]:
    """Make an API token for yourself (the key is in this answer only)

     The new token acts as you, with your roles. Its key is shown in this answer and never again (only
    its digest is stored); lose it and make another. The creation is recorded with your user in the
    admin log.

    Args:
        body (TokenCreateRequest): Refuses keys it does not declare. Read-only fields are
            declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | TokenCreated]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: TokenCreateRequest,
) -> Error | TokenCreated | None:
    """Make an API token for yourself (the key is in this answer only)

     The new token acts as you, with your roles. Its key is shown in this answer and never again (only
    its digest is stored); lose it and make another. The creation is recorded with your user in the
    admin log.

    Args:
        body (TokenCreateRequest): Refuses keys it does not declare. Read-only fields are
            declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | TokenCreated
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
