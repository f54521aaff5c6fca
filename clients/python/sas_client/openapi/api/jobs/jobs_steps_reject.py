from http import HTTPStatus
from typing import Any
from urllib.parse import quote
from uuid import UUID

import httpx

from ... import errors
from ...client import AuthenticatedClient, Client
from ...models.approval_decision_request import ApprovalDecisionRequest
from ...models.error import Error
from ...models.step import Step
from ...types import UNSET, Response, Unset


def _get_kwargs(
    job_id: UUID,
    step_name: str,
    *,
    body: ApprovalDecisionRequest | Unset = UNSET,
) -> dict[str, Any]:
    headers: dict[str, Any] = {}

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/api/v1/jobs/{job_id}/steps/{step_name}/reject/".format(
            job_id=quote(str(job_id), safe=""),
            step_name=quote(str(step_name), safe=""),
        ),
    }

    if not isinstance(body, Unset):
        _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs


def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Error | Step | None:
    if response.status_code == 200:
        response_200 = Step.from_dict(response.json())

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

    if response.status_code == 410:
        response_410 = Error.from_dict(response.json())

        return response_410

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
) -> Response[Error | Step]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    body: ApprovalDecisionRequest | Unset = UNSET,
) -> Response[Error | Step]:
    """Reject a step waiting for an approval

     The step fails with the comment as its reason; the step's policy decides the job (compensate when it
    names none; hold parks the step for an operator). 403: not a member of the step's group (an operator
    when it names none). 409: the step is not waiting.

    Args:
        job_id (UUID):
        step_name (str):
        body (ApprovalDecisionRequest | Unset): Refuses keys it does not declare. Read-only fields
            are declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Step]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        step_name=step_name,
        body=body,
    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)


def sync(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    body: ApprovalDecisionRequest | Unset = UNSET,
) -> Error | Step | None:
    """Reject a step waiting for an approval

     The step fails with the comment as its reason; the step's policy decides the job (compensate when it
    names none; hold parks the step for an operator). 403: not a member of the step's group (an operator
    when it names none). 409: the step is not waiting.

    Args:
        job_id (UUID):
        step_name (str):
        body (ApprovalDecisionRequest | Unset): Refuses keys it does not declare. Read-only fields
            are declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Step
    """

    return sync_detailed(
        job_id=job_id,
        step_name=step_name,
        client=client,
        body=body,
    ).parsed


async def asyncio_detailed(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    body: ApprovalDecisionRequest | Unset = UNSET,
) -> Response[Error | Step]:
    """Reject a step waiting for an approval

     The step fails with the comment as its reason; the step's policy decides the job (compensate when it
    names none; hold parks the step for an operator). 403: not a member of the step's group (an operator
    when it names none). 409: the step is not waiting.

    Args:
        job_id (UUID):
        step_name (str):
        body (ApprovalDecisionRequest | Unset): Refuses keys it does not declare. Read-only fields
            are declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Error | Step]
    """

    kwargs = _get_kwargs(
        job_id=job_id,
        step_name=step_name,
        body=body,
    )

    response = await client.get_async_httpx_client().request(**kwargs)

    return _build_response(client=client, response=response)


async def asyncio(
    job_id: UUID,
    step_name: str,
    *,
    client: AuthenticatedClient,
    body: ApprovalDecisionRequest | Unset = UNSET,
) -> Error | Step | None:
    """Reject a step waiting for an approval

     The step fails with the comment as its reason; the step's policy decides the job (compensate when it
    names none; hold parks the step for an operator). 403: not a member of the step's group (an operator
    when it names none). 409: the step is not waiting.

    Args:
        job_id (UUID):
        step_name (str):
        body (ApprovalDecisionRequest | Unset): Refuses keys it does not declare. Read-only fields
            are declared, so a representation read
            from the API can be sent back as it is.

            A null for an optional field means "not given" (clients that write absent values as null
            need
            not leave the key out); for a text or list field a replacement must state, it is the empty
            value.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Error | Step
    """

    return (
        await asyncio_detailed(
            job_id=job_id,
            step_name=step_name,
            client=client,
            body=body,
        )
    ).parsed
