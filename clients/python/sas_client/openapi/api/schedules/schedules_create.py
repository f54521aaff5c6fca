from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.schedule import Schedule
from ...models.schedule_write_request import ScheduleWriteRequest
from ...types import Response


def _get_kwargs(
    *,
    body: ScheduleWriteRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/schedules/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Schedule | None:
    if response.status_code == 201:
        response_201 = Schedule.from_dict(response.json())

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
) -> Response[Error | Schedule]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: ScheduleWriteRequest,
) -> Response[Error | Schedule]:
    """Submit a job at an instant, or at every time of a cron expression

     Each firing submits exactly once (even with several clusters); its job carries the idempotency key
    `schedule:<id>:<fire time>` and a `job_scheduled` event. A user owns at most SAS_SCHEDULES_PER_USER
    schedules: one more is a 409 `limit_reached`.

    Args:
        body (ScheduleWriteRequest): Creating a schedule: a name, a workflow, and either `run_at`
            or `cron`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Schedule]
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
    body: ScheduleWriteRequest,
) -> Error | Schedule | None:
    """Submit a job at an instant, or at every time of a cron expression

     Each firing submits exactly once (even with several clusters); its job carries the idempotency key
    `schedule:<id>:<fire time>` and a `job_scheduled` event. A user owns at most SAS_SCHEDULES_PER_USER
    schedules: one more is a 409 `limit_reached`.

    Args:
        body (ScheduleWriteRequest): Creating a schedule: a name, a workflow, and either `run_at`
            or `cron`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Schedule
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: ScheduleWriteRequest,
) -> Response[Error | Schedule]:
    """Submit a job at an instant, or at every time of a cron expression

     Each firing submits exactly once (even with several clusters); its job carries the idempotency key
    `schedule:<id>:<fire time>` and a `job_scheduled` event. A user owns at most SAS_SCHEDULES_PER_USER
    schedules: one more is a 409 `limit_reached`.

    Args:
        body (ScheduleWriteRequest): Creating a schedule: a name, a workflow, and either `run_at`
            or `cron`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Schedule]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: ScheduleWriteRequest,
) -> Error | Schedule | None:
    """Submit a job at an instant, or at every time of a cron expression

     Each firing submits exactly once (even with several clusters); its job carries the idempotency key
    `schedule:<id>:<fire time>` and a `job_scheduled` event. A user owns at most SAS_SCHEDULES_PER_USER
    schedules: one more is a 409 `limit_reached`.

    Args:
        body (ScheduleWriteRequest): Creating a schedule: a name, a workflow, and either `run_at`
            or `cron`.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Schedule
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
