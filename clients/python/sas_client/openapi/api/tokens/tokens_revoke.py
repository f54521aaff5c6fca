from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.revoke_request import RevokeRequest
from ...models.token import Token
from ...types import UNSET, Response, Unset


def _get_kwargs(
    token_id: int,
    *,
    body: RevokeRequest | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/tokens/{token_id}/revoke/".format(
            token_id=quote(str(token_id), safe=""),
        ),
    }

    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Token | None:
    if response.status_code == 200:
        response_200 = Token.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 401:
        response_401 = Error.from_dict(response.json())

        return response_401

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
) -> Response[Error | Token]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    token_id: int,
    *,
    client: AuthenticatedClient,
    body: RevokeRequest | Unset = UNSET,
) -> Response[Error | Token]:
    """Revoke an API token (yours; an administrator: any)

     Idempotent: revoking a revoked token answers it as it is.

    Args:
        token_id (int):
        body (RevokeRequest | Unset): Refuses keys it does not declare. Read-only fields are
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
        Response[Error | Token]
    """

    kwargs = _get_kwargs(
        token_id=token_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    token_id: int,
    *,
    client: AuthenticatedClient,
    body: RevokeRequest | Unset = UNSET,
) -> Error | Token | None:
    """Revoke an API token (yours; an administrator: any)

     Idempotent: revoking a revoked token answers it as it is.

    Args:
        token_id (int):
        body (RevokeRequest | Unset): Refuses keys it does not declare. Read-only fields are
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
        Error | Token
    """

    return sync_detailed(
        token_id=token_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    token_id: int,
    *,
    client: AuthenticatedClient,
    body: RevokeRequest | Unset = UNSET,
) -> Response[Error | Token]:
    """Revoke an API token (yours; an administrator: any)

     Idempotent: revoking a revoked token answers it as it is.

    Args:
        token_id (int):
        body (RevokeRequest | Unset): Refuses keys it does not declare. Read-only fields are
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
        Response[Error | Token]
    """

    kwargs = _get_kwargs(
        token_id=token_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    token_id: int,
    *,
    client: AuthenticatedClient,
    body: RevokeRequest | Unset = UNSET,
) -> Error | Token | None:
    """Revoke an API token (yours; an administrator: any)

     Idempotent: revoking a revoked token answers it as it is.

    Args:
        token_id (int):
        body (RevokeRequest | Unset): Refuses keys it does not declare. Read-only fields are
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
        Error | Token
    """

    return (
        await asyncio_detailed(
            token_id=token_id,
            client=client,
            body=body,
        )
    ).parsed
