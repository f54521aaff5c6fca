from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.alert_subscription_created import AlertSubscriptionCreated
from ...models.alert_subscription_write_request import AlertSubscriptionWriteRequest
from ...models.error import Error
from ...types import Response


def _get_kwargs(
    *,
    body: AlertSubscriptionWriteRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/alerts/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> AlertSubscriptionCreated | Error | None:
    if response.status_code == 201:
        response_201 = AlertSubscriptionCreated.from_dict(response.json())

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

    if response.status_code == 429:
        response_429 = Error.from_dict(response.json())

        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Response[AlertSubscriptionCreated | Error]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: AlertSubscriptionWriteRequest,
) -> Response[AlertSubscriptionCreated | Error]:
    """Subscribe a webhook and/or an email address to alerts

     Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, circuit_opened. Each
    alert is sent once per subscription (retried until delivered). The answer holds the subscription's
    signing secret, this once.

    Args:
        body (AlertSubscriptionWriteRequest): Creating a subscription: a name, and a webhook URL
            and/or an email address. `kinds`
            defaults to every kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AlertSubscriptionCreated | Error]
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
    body: AlertSubscriptionWriteRequest,
) -> AlertSubscriptionCreated | Error | None:
    """Subscribe a webhook and/or an email address to alerts

     Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, circuit_opened. Each
    alert is sent once per subscription (retried until delivered). The answer holds the subscription's
    signing secret, this once.

    Args:
        body (AlertSubscriptionWriteRequest): Creating a subscription: a name, and a webhook URL
            and/or an email address. `kinds`
            defaults to every kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AlertSubscriptionCreated | Error
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: AlertSubscriptionWriteRequest,
) -> Response[AlertSubscriptionCreated | Error]:
    """Subscribe a webhook and/or an email address to alerts

     Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, circuit_opened. Each
    alert is sent once per subscription (retried until delivered). The answer holds the subscription's
    signing secret, this once.

    Args:
        body (AlertSubscriptionWriteRequest): Creating a subscription: a name, and a webhook URL
            and/or an email address. `kinds`
            defaults to every kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AlertSubscriptionCreated | Error]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: AlertSubscriptionWriteRequest,
) -> AlertSubscriptionCreated | Error | None:
    """Subscribe a webhook and/or an email address to alerts

     Kinds: step_needs_attention, job_failed, job_compensated, supervisor_stale, circuit_opened. Each
    alert is sent once per subscription (retried until delivered). The answer holds the subscription's
    signing secret, this once.

    Args:
        body (AlertSubscriptionWriteRequest): Creating a subscription: a name, and a webhook URL
            and/or an email address. `kinds`
            defaults to every kind.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AlertSubscriptionCreated | Error
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
