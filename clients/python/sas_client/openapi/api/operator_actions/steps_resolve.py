from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.step_action_result import StepActionResult
from ...models.step_resolve_request import StepResolveRequest
from ...types import Response


def _get_kwargs(
    step_id: int,
    *,
    body: StepResolveRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/steps/{step_id}/resolve/".format(
            step_id=quote(str(step_id), safe=""),
        ),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | StepActionResult | None:
    if response.status_code == 200:
        response_200 = StepActionResult.from_dict(response.json())

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
) -> Response[Error | StepActionResult]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    step_id: int,
    *,
    client: AuthenticatedClient,
    body: StepResolveRequest,
) -> Response[Error | StepActionResult]:
    """Complete a step by hand with its output

     The operator asserts that the step happened; the job moves on as if it had succeeded. Give the
    evidence in `reason`.

    Args:
        step_id (int):
        body (StepResolveRequest): Refuses keys it does not declare. Read-only fields are
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
        Response[Error | StepActionResult]
    """

    kwargs = _get_kwargs(
        step_id=step_id,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    step_id: int,
    *,
    client: AuthenticatedClient,
    body: StepResolveRequest,
) -> Error | StepActionResult | None:
    """Complete a step by hand with its output

     The operator asserts that the step happened; the job moves on as if it had succeeded. Give the
    evidence in `reason`.

    Args:
        step_id (int):
        body (StepResolveRequest): Refuses keys it does not declare. Read-only fields are
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
        Error | StepActionResult
    """

    return sync_detailed(
        step_id=step_id,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    step_id: int,
    *,
    client: AuthenticatedClient,
    body: StepResolveRequest,
) -> Response[Error | StepActionResult]:
    """Complete a step by hand with its output

     The operator asserts that the step happened; the job moves on as if it had succeeded. Give the
    evidence in `reason`.

    Args:
        step_id (int):
        body (StepResolveRequest): Refuses keys it does not declare. Read-only fields are
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
        Response[Error | StepActionResult]
    """

    kwargs = _get_kwargs(
        step_id=step_id,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    step_id: int,
    *,
    client: AuthenticatedClient,
    body: StepResolveRequest,
) -> Error | StepActionResult | None:
    """Complete a step by hand with its output

     The operator asserts that the step happened; the job moves on as if it had succeeded. Give the
    evidence in `reason`.

    Args:
        step_id (int):
        body (StepResolveRequest): Refuses keys it does not declare. Read-only fields are
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
        Error | StepActionResult
    """

    return (
        await asyncio_detailed(
            step_id=step_id,
            client=client,
            body=body,
        )
    ).parsed
