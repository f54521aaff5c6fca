from http import HTTPStatus
from typing import Any

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.error import Error
from ...models.workflow import Workflow
from ...models.workflow_request import WorkflowRequest
from ...types import Response


def _get_kwargs(
    *,
    body: WorkflowRequest,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/workflows/",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(
    *, client: AuthenticatedClient | Client, response: httpx.Response
) -> Error | Workflow | None:
    if response.status_code == 201:
        response_201 = Workflow.from_dict(response.json())

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
) -> Response[Error | Workflow]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: WorkflowRequest,
) -> Response[Error | Workflow]:
    """Create a workflow (version 1)

     A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its next version.
    Unknown pools, policies or dependencies and cycles are refused, named.

    Args:
        body (WorkflowRequest): A workflow version as read, and as written to create one (POST):
            `name` and `steps` are
            required.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Workflow]
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
    body: WorkflowRequest,
) -> Error | Workflow | None:
    """Create a workflow (version 1)

     A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its next version.
    Unknown pools, policies or dependencies and cycles are refused, named.

    Args:
        body (WorkflowRequest): A workflow version as read, and as written to create one (POST):
            `name` and `steps` are
            required.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Workflow
    """

    return sync_detailed(
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: WorkflowRequest,
) -> Response[Error | Workflow]:
    """Create a workflow (version 1)

     A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its next version.
    Unknown pools, policies or dependencies and cycles are refused, named.

    Args:
        body (WorkflowRequest): A workflow version as read, and as written to create one (POST):
            `name` and `steps` are
            required.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Workflow]
    """

    kwargs = _get_kwargs(
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    *,
    client: AuthenticatedClient,
    body: WorkflowRequest,
) -> Error | Workflow | None:
    """Create a workflow (version 1)

     A name already in use is refused: PUT or PATCH /api/v1/workflows/{name}/ makes its next version.
    Unknown pools, policies or dependencies and cycles are refused, named.

    Args:
        body (WorkflowRequest): A workflow version as read, and as written to create one (POST):
            `name` and `steps` are
            required.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Workflow
    """

    return (
        await asyncio_detailed(
            client=client,
            body=body,
        )
    ).parsed
