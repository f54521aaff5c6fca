"""The hostile campaign's contract and expression bombs (`fault_campaign --hostile`, unless
`--no-bombs`): definitions and inputs built to cost what the guards of scheduler/contracts.py and
scheduler/expressions.py bound, flooded over the REST API beside the ordinary submissions, and
the figures that say the guards held and the web tier kept answering the others
(docs/reliability.md, "Contract and expression bombs").

What is sent:
- **refused definitions** (through POST /api/v1/workflows/ as an administrator, at the start and
  then among the flood): a schema `{"$ref": "#"}`, a `$ref` cycle through `allOf`, a back
  reference and a look-around in a pattern, a condition of 998 `!`; each must be a 4xx;
- **contract bombs**: jobs of `campaign_bomb_contract`, whose input contract has `uniqueItems`
  over objects, the backtracking pattern `^(a+)+$` on a string and in `patternProperties`:
  4,000 objects with the last equal to the first, 50,001 characters `a...ab`, 50 keys of 1,001
  such characters (each must be a 400), and inputs that match (4,000 distinct objects, 50,000
  `a`: a 201, and a job that ends at once through a timer of no time);
- **expression bombs**: jobs of four workflows whose second step (after `reserve`, a call) doubles
  `input.s` 25 times with `join`, shares `[@, @]` 25 deep in an input template, takes `to_string`
  of that, or doubles it with `join` in its condition: each must stop at MAX_VALUE_BYTES, its step
  failed (a mapping) or held (a condition) with the reason, and never reach the remote.

The flood is `threads` threads sending, in turn, from a deck of those kinds at `rate` per second
in all, each request under a deadline; every answer is counted by kind and status. A 5xx or no
answer while PostgreSQL restarts (the campaign's `--pg-restart`) is counted apart.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection

from sas_project.permissions import role_groups_ensure
from sas_project.tokens.services import token_create
from scheduler.expressions import MAX_VALUE_BYTES
from scheduler.models import JOB_SETTLED, Job, JobStatus, Step, StepStatus
from testbed.definitions import ensure_workflow
from testbed.processes import percentile

WORKFLOW_CONTRACT = "campaign_bomb_contract"
WORKFLOW_JOIN = "campaign_bomb_join"
WORKFLOW_SHARE = "campaign_bomb_share"
WORKFLOW_TO_STRING = "campaign_bomb_to_string"
WORKFLOW_WHEN = "campaign_bomb_when"
#: Expression bomb kind -> its workflow. The bomb is the step named BOMB_STEP.
EXPRESSION_KINDS = {
    "expr_join": WORKFLOW_JOIN,
    "expr_share": WORKFLOW_SHARE,
    "expr_to_string": WORKFLOW_TO_STRING,
    "expr_when": WORKFLOW_WHEN,
}
ALL_WORKFLOWS = (WORKFLOW_CONTRACT, *EXPRESSION_KINDS.values())
#: Where a bomb job may end: a held bomb (a condition) leaves its job needing attention.
SETTLED = {*JOB_SETTLED, JobStatus.NEEDS_ATTENTION}
BOMB_STEP = "bomb"
#: Contract bombs that break the contract (a 400 expected) and that keep it (a 201 expected).
CONTRACT_REFUSED = ("unique_dup", "evil_string", "evil_keys")
CONTRACT_ACCEPTED = ("unique_ok", "evil_ok")
#: The flood's deck: half contract bombs to refuse, a third expression bombs, the rest accepted
#: contract bombs (each a job with a large input).
DECK = (
    "unique_dup",
    "evil_string",
    "evil_keys",
    "expr_join",
    "unique_dup",
    "evil_string",
    "evil_keys",
    "expr_share",
    "unique_ok",
    "expr_to_string",
    "evil_ok",
    "expr_when",
)
#: One definition the flood tries to save among this many bombs.
DEFINITION_EVERY = 10
ITEMS = 4000
EVIL_CHARS = 50_000
EVIL_KEYS = 50
DOUBLINGS = 25
#: The deadline of one bomb request (seconds): past it, the answer is counted as lost.
REQUEST_TIMEOUT = 30.0
#: Must be 0.
MUST_BE_ZERO = (
    "bomb_definitions_not_refused",
    "bomb_answers_5xx",
    "bomb_answers_lost",
    "contract_bombs_not_400",
    "contract_inputs_refused",
    "expression_bombs_not_stopped",
    "bomb_steps_called",
    "bomb_jobs_not_settled",
)

_JOIN_CHAIN = " | ".join(["join('', [@, @])"] * DOUBLINGS)
_SHARE_CHAIN = " | ".join(["[@, @]"] * DOUBLINGS)
CONTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "sku": {"type": "string"},
        "items": {"type": "array", "uniqueItems": True, "items": {"type": "object"}},
        "s": {"type": "string", "pattern": "^(a+)+$"},
        "tags": {
            "type": "object",
            "patternProperties": {"^(a+)+$": {"type": "integer"}},
            "additionalProperties": False,
        },
    },
    "required": ["sku"],
}


def _reserve() -> dict[str, Any]:
    return {
        "name": "reserve",
        "pool": "campaign-inventory",
        "path": "/inventory/reserve",
        "status_path": "/inventory/reservations/{operation_id}",
        "compensation_path": "/inventory/release",
        "policy": "campaign",
    }


def _bomb(**bomb: Any) -> dict[str, Any]:
    return {
        "name": BOMB_STEP,
        "pool": "campaign-shipping",
        "path": "/shipping/schedule",
        "status_path": "/shipping/shipments/{operation_id}",
        "compensation_path": "/shipping/cancel",
        "depends_on": ["reserve"],
        "policy": "campaign",
        **bomb,
    }


def ensure_bomb_definitions() -> None:
    """The bombs' workflows (the campaign's pools and policies must exist)."""
    ensure_workflow(
        WORKFLOW_CONTRACT,
        description="An input contract expensive by design; a timer of no time.",
        steps=[{"name": "now", "kind": "timer", "wait_seconds": 0}],
        input_schema=CONTRACT_SCHEMA,
    )
    bombs: dict[str, dict[str, Any]] = {
        WORKFLOW_JOIN: {"input": f"input.s | {_JOIN_CHAIN}"},
        WORKFLOW_SHARE: {"input": {"s.$": f"input.s | {_SHARE_CHAIN}", "sku.$": "input.sku"}},
        WORKFLOW_TO_STRING: {"input": f"to_string(input.s | {_SHARE_CHAIN})"},
        WORKFLOW_WHEN: {"when": f"length(input.s | {_JOIN_CHAIN}) > `0`"},
    }
    for name, bomb in bombs.items():
        ensure_workflow(
            name,
            description="Reserve, then a step whose expression doubles.",
            steps=[_reserve(), _bomb(**bomb)],
        )


def refused_definitions(tag: str) -> list[tuple[str, dict[str, Any]]]:
    """(kind, body of POST /api/v1/workflows/) of definitions the API must refuse."""
    timer = [{"name": "now", "kind": "timer", "wait_seconds": 0}]

    def schema(kind: str, input_schema: Any) -> tuple[str, dict[str, Any]]:
        return kind, {"name": f"bomb_{kind}_{tag}", "steps": timer, "input_schema": input_schema}

    string = {"type": "object", "properties": {"s": {"type": "string"}}}
    return [
        schema("ref_self", {"$ref": "#"}),
        schema("ref_cycle", {"$ref": "#/$defs/a", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}]}}}),
        schema("back_reference", {**string, "properties": {"s": {"type": "string", "pattern": "^(a+)\\1$"}}}),
        schema("look_around", {**string, "properties": {"s": {"type": "string", "pattern": "^(?=a)a+$"}}}),
        (
            "deep_condition",
            {"name": f"bomb_deep_condition_{tag}", "steps": [{**_reserve(), "when": "!" * 998 + "@"}]},
        ),
    ]


def bomb_inputs() -> dict[str, dict[str, Any]]:
    """Each bomb kind's input (the same for every job of the kind but its `sku`)."""
    distinct = [{"sku": f"S{i:05d}", "n": i, "q": 1} for i in range(ITEMS)]
    evil = "a" * EVIL_CHARS
    small = {"quantity": 1, "amount": 1, "s": "x" * 100}
    return {
        "unique_dup": {"items": [*distinct[:-1], dict(distinct[0])]},
        "evil_string": {"s": evil + "b"},
        "evil_keys": {"tags": {"a" * 1000 + f"b{i}": i for i in range(EVIL_KEYS)}},
        "unique_ok": {"items": distinct},
        "evil_ok": {"s": evil},
        **dict.fromkeys(EXPRESSION_KINDS, small),
    }


def bomber_tokens() -> tuple[str, str]:
    """(a submitter's token, an administrator's token): the flood's tenant and the one who
    tries to save the bomb definitions."""
    role_groups_ensure()
    keys = []
    for username, group in (("campaign-bomber", "submitters"), ("campaign-bomb-admin", "administrators")):
        user, _ = get_user_model().objects.get_or_create(username=username)
        user.groups.add(Group.objects.get(name=group))
        keys.append(token_create(user=user, name="campaign")[1])
    return keys[0], keys[1]


@dataclass
class Answer:
    kind: str
    status: int  # 0: no answer (a timeout or a dropped connection)
    sent_at: float  # monotonic
    seconds: float
    detail: str = ""


@dataclass
class BombLog:
    answers: list[Answer] = field(default_factory=list)
    definitions: list[Answer] = field(default_factory=list)
    #: Accepted bomb jobs: job id -> kind.
    jobs: dict[str, str] = field(default_factory=dict)
    #: When the flood ran (monotonic), if it did.
    flood: tuple[float, float] | None = None
    errors: list[str] = field(default_factory=list)


class BombFlood:
    """Sends the refused definitions once, then (between `start` and `stop`) floods bombs."""

    def __init__(self, *, api_url: str, tokens: tuple[str, str], rate: float, run_id: str, threads: int = 2):
        def client(token: str) -> httpx.Client:
            return httpx.Client(
                base_url=api_url,
                headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
                timeout=REQUEST_TIMEOUT,
                trust_env=False,
            )

        self.submitter, self.admin = client(tokens[0]), client(tokens[1])
        self.rate = rate
        self.run_id = run_id
        self.inputs = bomb_inputs()
        self.log = BombLog()
        self._turn = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(i, threads), name=f"bomb-flood-{i}", daemon=True)
            for i in range(threads if rate > 0 else 0)
        ]

    def define(self) -> None:
        """Try to save every refused definition once."""
        for kind, body in refused_definitions(f"{self.run_id}_first"):
            self._save(kind, body)

    def start(self) -> None:
        self.log.flood = (time.monotonic(), float("inf"))
        for thread in self._threads:
            thread.start()

    def stop(self) -> BombLog:
        self._stop.set()
        for thread in self._threads:
            thread.join(REQUEST_TIMEOUT + 5)
        if self.log.flood is not None:
            self.log.flood = (self.log.flood[0], time.monotonic())
        self.submitter.close()
        self.admin.close()
        return self.log

    def _run(self, index: int, threads: int) -> None:
        every = threads / self.rate
        next_at = time.monotonic() + index * every / threads
        try:
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                next_at += every
                turn = next(self._turn)
                if turn % DEFINITION_EVERY == DEFINITION_EVERY - 1:
                    definitions = refused_definitions(f"{self.run_id}_{turn}")
                    self._save(*definitions[(turn // DEFINITION_EVERY) % len(definitions)])
                else:
                    self._submit(DECK[turn % len(DECK)], turn)
        except Exception as exc:  # noqa: BLE001 - reported; the campaign's checks still run
            self.log.errors.append(f"{type(exc).__name__}: {exc}"[:300])
        finally:
            connection.close()

    def _post(self, client: httpx.Client, path: str, kind: str, body: dict[str, Any], key: str) -> Answer:
        sent = time.monotonic()
        try:
            response = client.post(path, json=body, headers={"Idempotency-Key": key})
        except httpx.HTTPError as exc:
            return Answer(kind, 0, sent, time.monotonic() - sent, f"{type(exc).__name__}: {exc}"[:200])
        seconds = time.monotonic() - sent
        detail = response.text
        if response.status_code in (200, 201):
            try:
                detail = str(response.json()["id"])
            except (ValueError, KeyError, TypeError):
                return Answer(
                    kind, 0, sent, seconds, f"a {response.status_code} without a job: {detail[:150]}"
                )
        return Answer(kind, response.status_code, sent, seconds, detail[:300])

    def _save(self, kind: str, body: dict[str, Any]) -> None:
        answer = self._post(self.admin, "/api/v1/workflows/", kind, body, key=body["name"])
        with self._lock:
            self.log.definitions.append(answer)

    def _submit(self, kind: str, turn: int) -> None:
        workflow = EXPRESSION_KINDS.get(kind, WORKFLOW_CONTRACT)
        body = {"workflow": workflow, "input": {"sku": f"B{turn}", **self.inputs[kind]}}
        answer = self._post(self.submitter, "/api/v1/jobs/", kind, body, key=f"{self.run_id}-bomb-{turn}")
        with self._lock:
            self.log.answers.append(answer)
            if answer.status in (200, 201):
                self.log.jobs[answer.detail] = kind


def _during(answer: Answer, windows: Sequence[tuple[float, float]]) -> bool:
    """Whether the request overlapped one of `windows` (monotonic)."""
    end = answer.sent_at + answer.seconds
    return any(answer.sent_at <= until and end >= since for since, until in windows)


def _spread(values: list[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in values]
    rounded = {q: percentile(ms, q) for q in (50, 99)}
    return {
        "count": len(ms),
        "p50": None if rounded[50] is None else round(rounded[50], 1),
        "p99": None if rounded[99] is None else round(rounded[99], 1),
        "max": round(max(ms), 1) if ms else None,
    }


def ordinary_latency(
    samples: Sequence[tuple[float, float]], flood: tuple[float, float] | None
) -> dict[str, dict[str, Any]]:
    """The ordinary submissions' time to acceptance ((sent at, seconds), monotonic), split by
    whether the flood was running when each was sent."""
    on = [s for at, s in samples if flood is not None and flood[0] <= at <= flood[1]]
    off = [s for at, s in samples if flood is None or not flood[0] <= at <= flood[1]]
    return {"without_flood": _spread(off), "with_flood": _spread(on)}


def _reason(step: Step) -> str:
    return f"{step.status_reason} {step.error}"


def check_bombs(
    log: BombLog,
    stats: dict[str, Any],
    *,
    restarts: Sequence[tuple[float, float]],
    ordinary: Sequence[tuple[float, float]],
) -> dict[str, Any]:
    """The bombs' figures. `restarts` are the PostgreSQL restarts' windows (monotonic), where a
    5xx or no answer is expected; `ordinary` the ordinary submissions' (sent at, seconds)."""
    by_kind: dict[str, Counter[str]] = {}
    for answer in log.answers:
        by_kind.setdefault(answer.kind, Counter())[str(answer.status or "none")] += 1
    excused = [a for a in log.answers if (a.status == 0 or a.status >= 500) and _during(a, restarts)]
    counted = [a for a in log.answers if not ((a.status == 0 or a.status >= 500) and _during(a, restarts))]
    five = [a for a in counted if a.status >= 500]
    lost = [a for a in counted if a.status == 0]
    # A 429 is the bomber's budget of contract checking spent (scheduler.contract_budget): refused
    # before the check, nothing written.
    throttled = [a for a in counted if a.status == 429]
    not_400 = [
        a
        for a in counted
        if a.kind in CONTRACT_REFUSED and a.status and a.status < 500 and a.status not in (400, 429)
    ]
    inputs_refused = [
        a
        for a in counted
        if a.status and a.status < 500 and a.status not in (200, 201, 429) and a.kind not in CONTRACT_REFUSED
    ]
    definitions: dict[str, Counter[str]] = {}
    for answer in log.definitions:
        definitions.setdefault(answer.kind, Counter())[str(answer.status or "none")] += 1
    bad_definitions = [
        a
        for a in log.definitions
        if not 400 <= a.status < 500 and not (a.status != 201 and _during(a, restarts))
    ]
    # The expression bombs: each job whose `reserve` succeeded (and was not held: a hostile answer
    # the database cannot store holds its success) ran its bomb, which must have stopped at the
    # size limit (failed or held, naming it); and no bomb may have called the remote.
    expression_jobs = [job for job, kind in log.jobs.items() if kind in EXPRESSION_KINDS]
    steps = {
        (str(s.job_id), s.name): s for s in Step.objects.filter(job_id__in=expression_jobs, compensates=None)
    }
    jobs = dict(Job.objects.filter(pk__in=list(log.jobs)).values_list("pk", "status"))
    not_settled = [str(pk) for pk, status in jobs.items() if status not in SETTLED]
    reached, not_stopped = [], []
    bomb_ends: Counter[str] = Counter()
    #: One reason per kind, its end (a condition's reason begins with the condition's text).
    reasons: dict[str, str] = {}
    for job in expression_jobs:
        reserve, bomb = steps.get((job, "reserve")), steps.get((job, BOMB_STEP))
        if (
            reserve is None
            or bomb is None
            or reserve.last_outcome != "succeeded"
            or reserve.status not in (StepStatus.SUCCEEDED, StepStatus.COMPENSATED)
        ):
            continue
        reached.append(job)
        bomb_ends[bomb.status] += 1
        reasons.setdefault(log.jobs[job], bomb.status_reason[-160:] or bomb.error[-160:])
        if bomb.status not in (StepStatus.FAILED, StepStatus.HELD) or str(MAX_VALUE_BYTES) not in _reason(
            bomb
        ):
            not_stopped.append(f"{log.jobs[job]} {job}: {bomb.status} {_reason(bomb)[:200]!r}")
    bombs_called = [
        f"{job} {step}"
        for job, step, _index, undo, _op, _n in stats.get("callers", [])
        if step == BOMB_STEP and not undo and str(job) in log.jobs
    ]
    kinds = Counter(log.jobs.values())
    figures = {
        "bombs_sent": len(log.answers),
        "bomb_answers_by_kind": {kind: dict(c) for kind, c in sorted(by_kind.items())},
        "bomb_answer_ms_by_kind": {
            kind: _spread([a.seconds for a in log.answers if a.kind == kind and a.status])
            for kind in sorted(by_kind)
        },
        "bomb_answers_during_restarts": len(excused),
        "bomb_answers_5xx": len(five),
        "bomb_answers_lost": len(lost),
        "bomb_answers_throttled": len(throttled),
        "contract_bombs_not_400": len(not_400),
        "contract_inputs_refused": len(inputs_refused),
        "bomb_definitions_tried": {kind: dict(c) for kind, c in sorted(definitions.items())},
        "bomb_definitions_not_refused": len(bad_definitions),
        "bomb_jobs_by_kind": dict(sorted(kinds.items())),
        "bomb_jobs_by_status": dict(sorted(Counter(jobs.values()).items())),
        "bomb_jobs_not_settled": len(not_settled),
        "expression_bombs_reached": len(reached),
        "expression_bomb_steps_by_status": dict(sorted(bomb_ends.items())),
        "expression_bombs_not_stopped": len(not_stopped),
        "expression_bomb_reasons": dict(sorted(reasons.items())),
        "bomb_steps_called": len(bombs_called),
        "ordinary_submit_ms": ordinary_latency(ordinary, log.flood),
        "flood_seconds": round(log.flood[1] - log.flood[0], 1) if log.flood else 0,
    }
    return {
        "figures": figures,
        "violations": {name: figures[name] for name in MUST_BE_ZERO if figures[name]},
        "examples": {
            "answers_5xx": [f"{a.kind} {a.status} {a.detail[:150]}" for a in five[:5]],
            "answers_lost": [f"{a.kind} {a.detail[:150]}" for a in lost[:5]],
            "contract_bombs_not_400": [f"{a.kind} {a.status} {a.detail[:150]}" for a in not_400[:5]],
            "contract_inputs_refused": [f"{a.kind} {a.status} {a.detail[:150]}" for a in inputs_refused[:5]],
            "definitions_not_refused": [f"{a.kind} {a.status} {a.detail[:150]}" for a in bad_definitions[:5]],
            "expression_bombs_not_stopped": not_stopped[:5],
            "bomb_steps_called": bombs_called[:5],
            "not_settled": not_settled[:5],
        },
        "errors": log.errors[:10],
    }


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{kind} {n}" for kind, n in counts.items()) or "none"


def table_rows(bombs: dict[str, Any]) -> list[tuple[str, Any]]:
    f = bombs["figures"]
    latency = f["ordinary_submit_ms"]

    def spread(s: dict[str, Any]) -> str:
        return f"{s['p50']} / {s['p99']} (n={s['count']})"

    return [
        (
            "bomb definitions tried, by answer",
            "; ".join(f"{k}: {_counts(v)}" for k, v in f["bomb_definitions_tried"].items()),
        ),
        ("bomb definitions not refused with a 4xx (must be 0)", f["bomb_definitions_not_refused"]),
        ("bombs sent (flood seconds)", f"{f['bombs_sent']} ({f['flood_seconds']})"),
        (
            "bomb answers by kind",
            "; ".join(f"{k}: {_counts(v)}" for k, v in f["bomb_answers_by_kind"].items()),
        ),
        (
            "bomb answers ms p99 by kind",
            ", ".join(f"{k} {v['p99']}" for k, v in f["bomb_answer_ms_by_kind"].items()),
        ),
        ("bomb answers 5xx / lost (must be 0)", f"{f['bomb_answers_5xx']} / {f['bomb_answers_lost']}"),
        ("bomb answers 5xx or lost during PostgreSQL restarts", f["bomb_answers_during_restarts"]),
        ("bomb answers 429 (the bomber's budget of contract checking spent)", f["bomb_answers_throttled"]),
        (
            "contract bombs not 400 or 429 / matching inputs refused (must be 0)",
            f"{f['contract_bombs_not_400']} / {f['contract_inputs_refused']}",
        ),
        ("bomb jobs by status", _counts(f["bomb_jobs_by_status"])),
        ("bomb jobs not settled (must be 0)", f["bomb_jobs_not_settled"]),
        (
            "expression bombs reached / their steps by status",
            f"{f['expression_bombs_reached']} / {_counts(f['expression_bomb_steps_by_status'])}",
        ),
        ("expression bombs not stopped at the size limit (must be 0)", f["expression_bombs_not_stopped"]),
        ("bomb steps that called the remote (must be 0)", f["bomb_steps_called"]),
        ("ordinary submissions ms p50 / p99, without the flood", spread(latency["without_flood"])),
        ("ordinary submissions ms p50 / p99, with the flood", spread(latency["with_flood"])),
    ]
