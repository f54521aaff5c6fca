"""The sandbox remote declines an account's first `input.declines` charges, each a new operation,
and lets the next one through; a resent operation is answered as it was the first time, so the
count is of operations, not of deliveries. The sandbox runs in-process."""

from __future__ import annotations

import httpx
import pytest

from testbed.sandbox import SandboxRemote

# No database at all: the same on SQLite.
pytestmark = pytest.mark.sqlite


def _charge(url: str, key: str, body_input: dict[str, object]) -> int:
    return httpx.post(
        f"{url}/payments/charge", headers={"Idempotency-Key": key}, json={"input": body_input}, timeout=10
    ).status_code


def test_an_account_declines_its_first_charges_then_takes_the_next(sandbox: SandboxRemote) -> None:
    ask = {"amount": 5, "account": "A", "declines": 2}
    assert [_charge(sandbox.url, f"op-{n}", ask) for n in range(4)] == [402, 402, 200, 200]
    # Another account counts apart; without `declines`, nothing is declined.
    assert _charge(sandbox.url, "other", {**ask, "account": "B"}) == 402
    assert _charge(sandbox.url, "plain", {"amount": 5, "account": "C"}) == 200


def test_a_resent_operation_is_answered_as_first_and_is_not_counted_again(sandbox: SandboxRemote) -> None:
    ask = {"amount": 5, "sku": "order-7", "declines": 1}  # the sku stands for the account
    assert _charge(sandbox.url, "try-1", ask) == 402
    assert _charge(sandbox.url, "try-1", ask) == 402  # replayed: still the one decline
    assert _charge(sandbox.url, "try-2", ask) == 200
    assert _charge(sandbox.url, "try-1", ask) == 402


def test_declines_that_are_not_a_small_count_are_refused(sandbox: SandboxRemote) -> None:
    for declines in ("1", -1, True, 11, 1.5):
        assert _charge(sandbox.url, f"bad-{declines}", {"amount": 1, "declines": declines}) == 400
    assert _charge(sandbox.url, "bad-account", {"amount": 1, "declines": 1, "account": 3}) == 400
