from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.attempt_heartbeat_request import AttemptHeartbeatRequest
from ...models.attempt_heartbeat_result import AttemptHeartbeatResult
from ...models.error import Error
from ...types import UNSET, Response, Unset


def _get_kwargs(
    token: str,
    *,
    body: AttemptHeartbeatRequest | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/callbacks/{token}/heartbeat/".format(
            token=quote(str(token), safe=""),
        ),
    }

    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> AttemptHeartbeatResult | Error | None:
    if response.status_code == 200:
        response_200 = AttemptHeartbeatResult.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 410:
        response_410 = Error.from_dict(response.json())

        return response_410

    if response.status_code == 413:
        response_413 = Error.from_dict(response.json())

        return response_413

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[AttemptHeartbeatResult | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    token: str,
    *,
    client: AuthenticatedClient | Client,
    body: AttemptHeartbeatRequest | Unset = UNSET,
) -> Response[AttemptHeartbeatResult | Error]:
    """Report that an accepted call is still being worked on

     POST to the callback URL followed by `heartbeat/`, as often as the step's policy asks
    (`heartbeat_seconds`): each heartbeat moves the attempt's deadline that far ahead (never past the
    job's deadline or the step's budget) and records its details. 200 while the attempt is in flight;
    410 once it was given up on (finished, superseded, or its step moved on): nothing changes and the
    remote may stop. 403: an invalid token; 410 `token_expired`: an expired one.

    Args:
        token (str):
        body (AttemptHeartbeatRequest | Unset): A heartbeat a remote POSTs while it works on an
            accepted call.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AttemptHeartbeatResult | Error]
    """

    kwargs = _get_kwargs(
        token=token,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    token: str,
    *,
    client: AuthenticatedClient | Client,
    body: AttemptHeartbeatRequest | Unset = UNSET,
) -> AttemptHeartbeatResult | Error | None:
    """Report that an accepted call is still being worked on

     POST to the callback URL followed by `heartbeat/`, as often as the step's policy asks
    (`heartbeat_seconds`): each heartbeat moves the attempt's deadline that far ahead (never past the
    job's deadline or the step's budget) and records its details. 200 while the attempt is in flight;
    410 once it was given up on (finished, superseded, or its step moved on): nothing changes and the
    remote may stop. 403: an invalid token; 410 `token_expired`: an expired one.

    Args:
        token (str):
        body (AttemptHeartbeatRequest | Unset): A heartbeat a remote POSTs while it works on an
            accepted call.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AttemptHeartbeatResult | Error
    """

    return sync_detailed(
        token=token,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    token: str,
    *,
    client: AuthenticatedClient | Client,
    body: AttemptHeartbeatRequest | Unset = UNSET,
) -> Response[AttemptHeartbeatResult | Error]:
    """Report that an accepted call is still being worked on

     POST to the callback URL followed by `heartbeat/`, as often as the step's policy asks
    (`heartbeat_seconds`): each heartbeat moves the attempt's deadline that far ahead (never past the
    job's deadline or the step's budget) and records its details. 200 while the attempt is in flight;
    410 once it was given up on (finished, superseded, or its step moved on): nothing changes and the
    remote may stop. 403: an invalid token; 410 `token_expired`: an expired one.

    Args:
        token (str):
        body (AttemptHeartbeatRequest | Unset): A heartbeat a remote POSTs while it works on an
            accepted call.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AttemptHeartbeatResult | Error]
    """

    kwargs = _get_kwargs(
        token=token,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    token: str,
    *,
    client: AuthenticatedClient | Client,
    body: AttemptHeartbeatRequest | Unset = UNSET,
) -> AttemptHeartbeatResult | Error | None:
    """Report that an accepted call is still being worked on

     POST to the callback URL followed by `heartbeat/`, as often as the step's policy asks
    (`heartbeat_seconds`): each heartbeat moves the attempt's deadline that far ahead (never past the
    job's deadline or the step's budget) and records its details. 200 while the attempt is in flight;
    410 once it was given up on (finished, superseded, or its step moved on): nothing changes and the
    remote may stop. 403: an invalid token; 410 `token_expired`: an expired one.

    Args:
        token (str):
        body (AttemptHeartbeatRequest | Unset): A heartbeat a remote POSTs while it works on an
            accepted call.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AttemptHeartbeatResult | Error
    """

    return (
        await asyncio_detailed(
            token=token,
            client=client,
            body=body,
        )
    ).parsed
