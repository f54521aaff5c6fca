"""The fault campaign's ladder plans (testbed.campaign_loops.ladder_move): each plan sends its
decisions once, at the rung it names, by whom it names, and stops once its approval stopped
waiting (one plan, `too_late`, approves once more after the last rung, to be refused); and how
the campaign counts jobs that wait for an operator elsewhere (a held child, a key held by jobs
needing attention) and notes an unsettled one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from testbed.campaign_loops import CHILD_TRIES, LADDER_PLANS, RUNGS, ladder_move
from testbed.campaign_loops_checks import children_as_the_declines_say

pytestmark = pytest.mark.sqlite

WAITING: dict[str, Any] = {"status": "waiting", "rung": 0, "reassigned": False, "job": "running"}


def _walk(plan: str, states: list[dict[str, Any]]) -> tuple[list[tuple[str, str, str, bool]], set[str]]:
    done: set[str] = set()
    moves = []
    for state in states:
        move = ladder_move(plan, done, **state)
        if move is not None:
            moves.append(move)
    return moves, done


def _ladder() -> list[dict[str, Any]]:
    """An approval nobody decides: waiting, reminded, reassigned, then ended by its last rung."""
    return [
        WAITING,
        WAITING,
        {**WAITING, "rung": 1},
        {**WAITING, "rung": 1},
        {**WAITING, "rung": 2, "reassigned": True},
        {**WAITING, "rung": 2, "reassigned": True},
        {"status": "failed", "rung": len(RUNGS), "reassigned": True, "job": "compensating"},
        {"status": "failed", "rung": len(RUNGS), "reassigned": True, "job": "compensated"},
    ]


def test_each_plan_sends_its_decisions_once_by_whom_it_names() -> None:
    sent = {plan: _walk(plan, _ladder())[0] for plan in LADDER_PLANS}
    assert sent == {
        "early": [("approver", "approve", "early", False)],
        "after_remind": [("approver", "approve", "after_remind", False)],
        "lead": [("lead", "approve", "lead-early", True), ("lead", "approve", "lead", False)],
        "reject": [("approver", "reject", "reject", False)],
        "never": [],
        "self": [("own", "approve", "self", True), ("approver", "approve", "self-other", False)],
        "too_late": [("approver", "approve", "too_late", True)],
    }


def test_a_plan_is_finished_once_its_approval_stopped_waiting() -> None:
    for plan in LADDER_PLANS:
        assert "finished" in _walk(plan, _ladder())[1], plan
    # Decided at once: nothing more once the step succeeded, whatever the job does next.
    moves, done = _walk("early", [WAITING, {**WAITING, "status": "succeeded"}])
    assert moves == [("approver", "approve", "early", False)] and "finished" in done


def test_nothing_is_sent_before_the_step_waits_or_after_its_job_ended() -> None:
    pending = {**WAITING, "status": "pending"}
    for plan in LADDER_PLANS:
        assert _walk(plan, [pending, {**pending, "job": "compensated"}])[0] == []
    # A job that compensated before its approval waited: too late has nothing to refuse.
    moves, done = _walk(
        "too_late", [{"status": "skipped", "rung": 0, "reassigned": False, "job": "compensated"}]
    )
    assert moves == [] and "finished" in done


def test_a_parent_whose_child_is_held_for_an_operator_counts_as_held_too() -> None:
    from types import SimpleNamespace

    from testbed.campaign_language import held_child_parents

    def job(pk: str, status: str, parent: str | None = None) -> Any:
        return SimpleNamespace(pk=pk, status=status, parent_job_id=parent)

    jobs = [
        job("top", "running"),
        job("mid", "running", "top"),
        job("leaf", "needs_attention", "mid"),
        job("other", "running"),
        job("done", "succeeded", "other"),
        job("ended", "compensated"),
        job("held-under-ended", "needs_attention", "ended"),
    ]
    assert held_child_parents(jobs) == {"top", "mid"}


def test_a_job_waiting_for_a_key_its_held_holders_fill_waits_for_their_operator() -> None:
    from types import SimpleNamespace

    from testbed.campaign import behind_held_holders

    keyed = SimpleNamespace(concurrency={"limit": 2})

    def job(pk: str, status: str, key: str, workflow: int = 1) -> Any:
        return SimpleNamespace(
            pk=pk, status=status, concurrency_key=key, workflow_id=workflow, workflow=keyed
        )

    jobs = [
        job("h1", "needs_attention", "a"),
        job("h2", "running", "a"),  # waits for a held child: in `held`
        job("w1", "waiting", "a"),
        job("h3", "needs_attention", "b"),  # one holder of two: the key has room for a start
        job("w2", "waiting", "b"),
        job("h4", "needs_attention", "c"),
        job("h5", "running", "c"),  # running on its own: the key frees when it ends
        job("w3", "waiting", "c"),
    ]
    assert behind_held_holders(jobs, held={"h2"}) == {"w1"}


def test_an_unsettled_job_is_noted_with_its_keys_holders() -> None:
    from types import SimpleNamespace

    from testbed.campaign import unsettled_note

    orders = SimpleNamespace(name="orders")

    def job(pk: str, status: str, key: str = "") -> Any:
        return SimpleNamespace(pk=pk, status=status, concurrency_key=key, workflow_id=1, workflow=orders)

    jobs = {
        j.pk: j for j in (job("w", "waiting", "a"), job("h", "needs_attention", "a"), job("r", "running"))
    }
    assert unsettled_note(jobs, "w") == "w waiting orders key a held by ['h needs_attention']"
    assert unsettled_note(jobs, "r") == "r running orders"


def test_a_parent_whose_invoice_was_never_reached_has_no_children_whatever_its_declines() -> None:
    """The parent's `reserve` failed: its job compensated, the invoice step was skipped and took
    no child. The account's declines never came into play (a 1,000-job run counted this once)."""

    def child(status: str, reason: str = "") -> Any:
        return SimpleNamespace(status=status, compensation_reason=reason)

    failed = [child("compensated", "failure") for _ in range(CHILD_TRIES)]
    for declines in (0, 1, CHILD_TRIES):
        assert children_as_the_declines_say(declines=declines, step_status="skipped", children=[])
        assert not children_as_the_declines_say(declines=declines, step_status="skipped", children=failed[:1])
    # Reached: as before, one child per decline and one that succeeded; all tries failing at most.
    assert children_as_the_declines_say(
        declines=1, step_status="succeeded", children=[failed[0], child("succeeded")]
    )
    assert not children_as_the_declines_say(
        declines=1, step_status="succeeded", children=[child("succeeded")]
    )
    assert children_as_the_declines_say(declines=CHILD_TRIES, step_status="failed", children=failed)
    assert not children_as_the_declines_say(declines=CHILD_TRIES, step_status="failed", children=failed[:2])
    assert children_as_the_declines_say(declines=CHILD_TRIES, step_status="waiting", children=failed[:2])
    assert not children_as_the_declines_say(
        declines=CHILD_TRIES, step_status="failed", children=[*failed[:2], child("succeeded")]
    )
