from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.attempt_callback_request import AttemptCallbackRequest
from ...models.attempt_callback_result import AttemptCallbackResult
from ...models.error import Error
from ...types import Response


def _get_kwargs(
    token: str,
    *,
    body: AttemptCallbackRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/callbacks/{token}/".format(
            token=quote(str(token), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> AttemptCallbackResult | Error | None:
    if response.status_code == 200:
        response_200 = AttemptCallbackResult.from_dict(response.json())

        return response_200

    if response.status_code == 400:
        response_400 = Error.from_dict(response.json())

        return response_400

    if response.status_code == 403:
        response_403 = Error.from_dict(response.json())

        return response_403

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

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
) -> Response[AttemptCallbackResult | Error]:
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
    body: AttemptCallbackRequest,
) -> Response[AttemptCallbackResult | Error]:
    """Report the result of a call the remote accepted (202)

     The URL comes from the X-SAS-Callback-URL header of the call; its token names one attempt, is
    signed, and expires. The first result wins: another POST with the same token is a 409 and changes
    nothing. 403: an invalid token; 410: an expired one.

    Args:
        token (str):
        body (AttemptCallbackRequest): The result a remote POSTs to an attempt's callback URL.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AttemptCallbackResult | Error]
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
    body: AttemptCallbackRequest,
) -> AttemptCallbackResult | Error | None:
    """Report the result of a call the remote accepted (202)

     The URL comes from the X-SAS-Callback-URL header of the call; its token names one attempt, is
    signed, and expires. The first result wins: another POST with the same token is a 409 and changes
    nothing. 403: an invalid token; 410: an expired one.

    Args:
        token (str):
        body (AttemptCallbackRequest): The result a remote POSTs to an attempt's callback URL.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AttemptCallbackResult | Error
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
    body: AttemptCallbackRequest,
) -> Response[AttemptCallbackResult | Error]:
    """Report the result of a call the remote accepted (202)

     The URL comes from the X-SAS-Callback-URL header of the call; its token names one attempt, is
    signed, and expires. The first result wins: another POST with the same token is a 409 and changes
    nothing. 403: an invalid token; 410: an expired one.

    Args:
        token (str):
        body (AttemptCallbackRequest): The result a remote POSTs to an attempt's callback URL.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AttemptCallbackResult | Error]
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
    body: AttemptCallbackRequest,
) -> AttemptCallbackResult | Error | None:
    """Report the result of a call the remote accepted (202)

     The URL comes from the X-SAS-Callback-URL header of the call; its token names one attempt, is
    signed, and expires. The first result wins: another POST with the same token is a 409 and changes
    nothing. 403: an invalid token; 410: an expired one.

    Args:
        token (str):
        body (AttemptCallbackRequest): The result a remote POSTs to an attempt's callback URL.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AttemptCallbackResult | Error
    """

    return (
        await asyncio_detailed(
            token=token,
            client=client,
            body=body,
        )
    ).parsed
