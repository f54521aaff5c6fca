from http import HTTPStatus
from typing import Any
from urllib.parse import quote
from uuid import UUID

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.signal import Signal
from ...models.signal_send_request import SignalSendRequest
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: UUID,
    *,
    body: SignalSendRequest,
    idempotency_key: str | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/jobs/{job_id}/signals/".format(
            job_id=quote(str(job_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Signal | None:
    if response.status_code == 200:
        response_200 = Signal.from_dict(response.json())

        return response_200

    if response.status_code == 202:
        response_202 = Signal.from_dict(response.json())

        return response_202

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

    if response.status_code == 409:
        response_409 = Error.from_dict(response.json())

        return response_409

    if response.status_code == 410:
        response_410 = Error.from_dict(response.json())

        return response_410

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
) -> Response[Error | Signal]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    job_id: UUID,
    *,
    client: AuthenticatedClient,
    body: SignalSendRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[Error | Signal]:
    """Send a signal to a job

     A step of the job that waits for this signal's name takes it, now or as soon as it starts waiting (a
    signal that comes early is kept); its payload becomes that step's output. 202: accepted
    (`consumed_by` names the step if one took it at once). 400: no step of the job's workflow waits for
    this name. 409: the job is settled or compensating (nothing changes). 422: the Idempotency-Key was
    used for another signal.

    Args:
        job_id (UUID):
        idempotency_key (str | Unset):
        body (SignalSendRequest): A signal sent to a job: a step waiting for its name takes it
            (now, or when it starts
            waiting) and its payload becomes the step's output.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Signal]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: UUID,
    *,
    client: AuthenticatedClient,
    body: SignalSendRequest,
    idempotency_key: str | Unset = UNSET,
) -> Error | Signal | None:
    """Send a signal to a job

     A step of the job that waits for this signal's name takes it, now or as soon as it starts waiting (a
    signal that comes early is kept); its payload becomes that step's output. 202: accepted
    (`consumed_by` names the step if one took it at once). 400: no step of the job's workflow waits for
    this name. 409: the job is settled or compensating (nothing changes). 422: the Idempotency-Key was
    used for another signal.

    Args:
        job_id (UUID):
        idempotency_key (str | Unset):
        body (SignalSendRequest): A signal sent to a job: a step waiting for its name takes it
            (now, or when it starts
            waiting) and its payload becomes the step's output.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Signal
    """

    return sync_detailed(
        job_id=job_id,
        client=client,
        body=body,
        idempotency_key=idempotency_key,
    ).parsed


async def asyncio_detailed(
    job_id: UUID,
    *,
    client: AuthenticatedClient,
    body: SignalSendRequest,
    idempotency_key: str | Unset = UNSET,
) -> Response[Error | Signal]:
    """Send a signal to a job

     A step of the job that waits for this signal's name takes it, now or as soon as it starts waiting (a
    signal that comes early is kept); its payload becomes that step's output. 202: accepted
    (`consumed_by` names the step if one took it at once). 400: no step of the job's workflow waits for
    this name. 409: the job is settled or compensating (nothing changes). 422: the Idempotency-Key was
    used for another signal.

    Args:
        job_id (UUID):
        idempotency_key (str | Unset):
        body (SignalSendRequest): A signal sent to a job: a step waiting for its name takes it
            (now, or when it starts
            waiting) and its payload becomes the step's output.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Signal]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        body=body,
        idempotency_key=idempotency_key,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: UUID,
    *,
    client: AuthenticatedClient,
    body: SignalSendRequest,
    idempotency_key: str | Unset = UNSET,
) -> Error | Signal | None:
    """Send a signal to a job

     A step of the job that waits for this signal's name takes it, now or as soon as it starts waiting (a
    signal that comes early is kept); its payload becomes that step's output. 202: accepted
    (`consumed_by` names the step if one took it at once). 400: no step of the job's workflow waits for
    this name. 409: the job is settled or compensating (nothing changes). 422: the Idempotency-Key was
    used for another signal.

    Args:
        job_id (UUID):
        idempotency_key (str | Unset):
        body (SignalSendRequest): A signal sent to a job: a step waiting for its name takes it
            (now, or when it starts
            waiting) and its payload becomes the step's output.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Signal
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            client=client,
            body=body,
            idempotency_key=idempotency_key,
        )
    ).parsed
