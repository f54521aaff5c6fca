"""The sandbox remote loses the answers of an operation's first `input.drops` deliveries, having
done the work: the caller hears nothing, a resent call gets the stored answer, and the effect
happened once. The sandbox runs in-process."""

from __future__ import annotations

import httpx
import pytest

from testbed.sandbox import SandboxRemote

# No database at all: the same on SQLite.
pytestmark = pytest.mark.sqlite


def _reserve(url: str, key: str, body_input: dict[str, object]) -> int | str:
    try:
        return httpx.post(
            f"{url}/inventory/reserve",
            headers={"Idempotency-Key": key},
            json={"input": body_input},
            timeout=10,
        ).status_code
    except httpx.TransportError:
        return "no answer"


def test_the_first_deliveries_lose_their_answer_and_the_effect_happens_once(sandbox: SandboxRemote) -> None:
    # (A campaign holds a dropped call past its timeout; here it is hung up at once.)
    assert httpx.post(f"{sandbox.url}/config", json={"drop_hold_ms": 0}, timeout=10).status_code == 200
    ask = {"sku": "S1", "quantity": 1, "drops": 2}
    assert [_reserve(sandbox.url, "op-1", ask) for _ in range(4)] == ["no answer", "no answer", 200, 200]
    # Counted per operation: another one loses its first answer too; without `drops`, none.
    assert _reserve(sandbox.url, "op-2", {**ask, "drops": 1}) == "no answer"
    assert _reserve(sandbox.url, "op-3", {"sku": "S3", "quantity": 1}) == 200
    stats = httpx.get(f"{sandbox.url}/stats", timeout=10).json()
    assert stats["effects"] == {"op-1": 1, "op-2": 1, "op-3": 1}
    assert stats["deliveries"] == {"op-1": 4, "op-2": 1, "op-3": 1}
    assert stats["faults"]["drop"] == 3


def test_drops_that_are_not_a_small_count_are_refused(sandbox: SandboxRemote) -> None:
    for drops in ("1", -1, True, 4, 1.5):
        assert _reserve(sandbox.url, f"bad-{drops}", {"sku": "S", "drops": drops}) == 400
