"""The sandbox answers a done operation with the poison its request asks for (the campaign's
`--poison`): stored and replayed like any answer, escaped as JSON escapes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.sandbox.core import ROUTES, BadRequest, OperationRequest, SandboxConfig, read_operation_request
from testbed.sandbox.store import SandboxStore

RESERVE = "/inventory/reserve"


def request(key: str, answer_with: str) -> OperationRequest:
    body = {"input": {"sku": "A", "answer_with": answer_with}, "job_id": "j", "step": "fetch"}
    return read_operation_request(ROUTES[RESERVE], RESERVE, key, body)


def test_a_poisoned_answer_is_done_stored_and_replayed_with_its_poison_escaped(tmp_path: Path) -> None:
    store = SandboxStore(tmp_path / "s.sqlite3")
    store.initialise()
    try:
        first = store.execute(request("k1", "surrogate"), SandboxConfig(), force_decline=False)
        again = store.execute(request("k1", "surrogate"), SandboxConfig(), force_decline=False)
        feb30 = store.execute(request("k2", "feb30"), SandboxConfig(), force_decline=False)
        stats = store.stats()
    finally:
        store.close()
    assert first.status == 200 and b'"note": "\\ud800"' in first.body  # escaped, as JSON writes it
    assert json.loads(first.body)["note"] == "\ud800"  # an unpaired surrogate once read
    assert again.replayed and again.body == first.body
    assert json.loads(feb30.body)["ready_at"] == "2024-02-30T00:00:00Z"
    assert stats["effects"] == {"k1": 1, "k2": 1}  # the work is done once, whatever the answer
    assert stats["poison"] == {"feb30": 1, "month13": 0, "offset": 0, "nan_text": 0, "surrogate": 1}


def test_an_unknown_poison_is_refused() -> None:
    with pytest.raises(BadRequest, match="answer_with"):
        request("k", "arsenic")
