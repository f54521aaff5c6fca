"""The checks of the fault campaign's events and correlation (testbed.campaign_events): the
figures of docs/reliability.md ("Events and correlation"), read from the database after the
drain (the events received and what they answered, the signals by key, the jobs' signals, steps
and history) and held against what the driver sent and was answered."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from scheduler.models import (
    Event,
    EventKind,
    InboundEvent,
    Job,
    JobStatus,
    KeyedSignal,
    Signal,
    Step,
    StepKind,
    StepStatus,
)
from testbed.campaign_events import (
    ALL_WORKFLOWS,
    GO,
    GO_STEPS,
    PAID,
    PAID_STEP,
    PAYMENTS,
    PLACED,
    SETTLED,
    WORKFLOW_ORDER,
    WORKFLOW_WITH_START,
    EventLog,
)

#: An event received within this of its job's wait ending is neither judged as due to reach it
#: nor not.
MARGIN = dt.timedelta(seconds=1.0)

MUST_BE_ZERO = (
    "events_starting_more_than_one_job",
    "orders_with_more_than_one_job",
    "placed_events_without_their_job",
    "started_jobs_not_settled",
    "started_jobs_not_naming_their_event",
    "duplicate_answers_not_the_first",
    "events_answered_delivered_without_their_signal",
    "events_not_reaching_their_waiting_job",
    "events_taken_by_another_orders_job",
    "jobs_left_waiting_for_an_event_sent_to_them",
    "signals_consumed_more_than_once",
    "steps_signalled_more_than_once",
    "keyed_signals_claimed_more_than_once",
    "keyed_signals_delivered_without_their_signal",
    "early_signals_not_consumed_by_their_job",
    "late_signals_taken",
    "signals_not_taken_by_their_waiting_step",
    "race_pairs_with_two_jobs",
    "with_start_signals_lost",
    "with_start_keys_on_two_jobs",
)


@dataclass
class _Rows:
    """What the checks read, once: the jobs, their steps, signals and history, the events and the
    signals by key of this run."""

    jobs: dict[str, Job]
    steps: dict[str, list[Step]]
    signals: dict[str, list[Signal]]
    history: dict[str, list[dict[str, Any]]]
    inbound: dict[str, InboundEvent]
    keyed: dict[str, KeyedSignal]

    @classmethod
    def read(cls, log: EventLog, run_id: str, since: dt.datetime) -> _Rows:
        found = Job.objects.filter(workflow__name__in=ALL_WORKFLOWS, created_at__gte=since)
        found |= Job.objects.filter(pk__in=log.all_jobs())
        jobs = {str(j.pk): j for j in found.select_related("workflow")}
        steps: dict[str, list[Step]] = defaultdict(list)
        for step in Step.objects.filter(job_id__in=list(jobs), kind=StepKind.ACTION).order_by("id"):
            steps[str(step.job_id)].append(step)
        signals: dict[str, list[Signal]] = defaultdict(list)
        for signal in Signal.objects.filter(job_id__in=list(jobs)).order_by("id"):
            signals[str(signal.job_id)].append(signal)
        history: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for e in (
            Event.objects.filter(job_id__in=list(jobs))
            .order_by("id")
            .values("job_id", "step_id", "kind", "from_status", "to_status", "data", "created_at")
        ):
            history[str(e["job_id"])].append(dict(e))
        inbound = {
            f"{e.source}/{e.event_id}": e
            for e in InboundEvent.objects.filter(event_id__startswith=f"{run_id}-")
        }
        keyed = {
            str(k.idempotency_key): k
            for k in KeyedSignal.objects.filter(business_key__startswith=f"{run_id}-")
        }
        return cls(jobs=jobs, steps=steps, signals=signals, history=history, inbound=inbound, keyed=keyed)

    def step(self, job_id: str, name: str) -> Step | None:
        return next((s for s in self.steps[job_id] if s.name == name), None)

    def left(self, job_id: str, step: Step) -> dt.datetime | None:
        """When the step stopped waiting (or pending), or its job started going back or ended."""
        still = (StepStatus.PENDING, StepStatus.WAITING)
        for e in self.history[job_id]:
            when: dt.datetime = e["created_at"]
            if e["step_id"] == step.pk and e["from_status"] in still and e["to_status"] not in (*still, ""):
                return when
            if e["step_id"] is None and e["to_status"] in (*SETTLED, JobStatus.COMPENSATING):
                return when
        return None

    def waited(self, job_id: str, step: Step) -> bool:
        return any(
            e["step_id"] == step.pk and e["kind"] == EventKind.STEP_WAITING for e in self.history[job_id]
        )


def check_events(log: EventLog, *, run_id: str, since: dt.datetime) -> dict[str, Any]:
    """The figures of docs/reliability.md ("Events and correlation"), from the database."""
    rows = _Rows.read(log, run_id, since)
    examples: dict[str, list[str]] = defaultdict(list)
    by_workflow = Counter(j.workflow.name for j in rows.jobs.values())
    figures: dict[str, Any] = {
        "events_rounds": log.rounds,
        "events_requests": dict(sorted(log.requests.items())),
        "events_requests_sent_again": log.sent_again,
        "events_answers_cut": log.answers_cut,
        "events_actions_not_sent": dict(log.not_sent),
        "events_jobs_by_workflow": dict(sorted(by_workflow.items())),
        "events_jobs_by_status": dict(Counter(j.status for j in rows.jobs.values())),
    }
    figures |= _events(log, rows, examples)
    figures |= _orders(log, rows, examples)
    figures |= _consumption(rows, examples)
    figures |= _by_key(log, rows, examples)
    figures |= _races(log, rows, examples)
    violations = {name: figures[name] for name in MUST_BE_ZERO if figures[name]}
    return {
        "figures": figures,
        "violations": violations,
        "examples": {k: v[:5] for k, v in examples.items()},
        "job_ids": sorted(rows.jobs),
        "notes": log.notes[:10],
    }


def _events(log: EventLog, rows: _Rows, examples: dict[str, list[str]]) -> dict[str, Any]:
    """Once per (source, id): one job per trigger, each answer the first, every job it started
    there, settled and naming it; every job it said it reached holding it."""
    answers = [a for got in log.answers.values() for a in got]
    differing = 0
    for name, got in log.answers.items():
        row = rows.inbound.get(name)
        first = None if row is None else _answer(row.pk, row.answer)
        seen = {_answer(a["event"], a) for a in got}
        if first is None or seen != {first}:
            differing += 1
            examples["duplicate_answers_not_the_first"].append(f"{name}: {seen} stored {first}")
    by_trigger: Counter[tuple[Any, ...]] = Counter()
    for job in rows.jobs.values():
        if job.started_by_event is not None:
            by_trigger[(job.started_by_event, job.workflow.name)] += 1
        if (job.idempotency_key or "").startswith("event:"):
            by_trigger[("key", job.idempotency_key)] += 1
    doubled = [k for k, n in by_trigger.items() if n > 1]
    examples["events_starting_more_than_one_job"] += [str(k) for k in doubled]
    placed = [e for e in rows.inbound.values() if e.type == PLACED]
    without = [
        e
        for e in placed
        if not e.answer.get("started") or any(j not in rows.jobs for j in e.answer["started"])
    ]
    examples["placed_events_without_their_job"] += [f"{e.event_id}: {e.answer}" for e in without]
    started = [(e, rows.jobs[j]) for e in placed for j in e.answer.get("started", []) if j in rows.jobs]
    unsettled = [j for _, j in started if j.status not in SETTLED]
    examples["started_jobs_not_settled"] += [f"{j.pk}: {j.status}" for j in unsettled]
    unnamed = [j for e, j in started if j.started_by_event != e.pk]
    examples["started_jobs_not_naming_their_event"] += [f"{j.pk}: {j.started_by_event}" for j in unnamed]
    undelivered = []
    for e in rows.inbound.values():
        key = f"event:{e.source}:{e.event_id}"
        for job in e.answer.get("signalled", []):
            if not any(s.idempotency_key == key for s in rows.signals.get(job, [])):
                undelivered.append(f"{e.event_id} -> {job}")
    examples["events_answered_delivered_without_their_signal"] += undelivered
    return {
        "events_posted": len(rows.inbound),
        "event_answers": len(answers),
        "duplicates_answered": sum(1 for a in answers if a["duplicate"]),
        "events_posted_twice_at_once": log.posts_at_once,
        "duplicate_answers_not_the_first": differing,
        "events_starting_more_than_one_job": len(doubled),
        "placed_events_without_their_job": len(without),
        "started_jobs_not_settled": len(unsettled),
        "started_jobs_not_naming_their_event": len(unnamed),
        "events_answered_delivered_without_their_signal": len(undelivered),
    }


def _answer(event: Any, answer: dict[str, Any]) -> tuple[Any, ...]:
    """What an event's answer says it did (the stored one, or one the driver was given)."""
    return (event, *(tuple(sorted(str(j) for j in answer.get(k, []))) for k in ("started", "signalled")))


def _orders(log: EventLog, rows: _Rows, examples: dict[str, list[str]]) -> dict[str, Any]:
    """A payment posted once its order's job exists reaches it while its wait is pending or
    waiting; no job takes another order's payment; a job sent its payment does not time out."""
    jobs_of = Counter(j.business_key for j in rows.jobs.values() if j.workflow.name == WORKFLOW_ORDER)
    several = [k for k, n in jobs_of.items() if n > 1]
    examples["orders_with_more_than_one_job"] += several
    reached: Counter[str] = Counter()
    missed = 0
    for order in log.orders:
        paid = rows.inbound.get(f"{PAYMENTS}/{order.paid_id}")
        job = rows.jobs.get(order.job_id or "")
        if paid is None or job is None:
            continue
        took = str(job.pk) in paid.answer.get("signalled", [])
        reached[f"{order.mode} {'reached' if took else 'not reached'}"] += 1
        step = rows.step(str(job.pk), PAID_STEP)
        if took or step is None or order.mode not in ("after_wait", "while_pending"):
            continue
        # Posted after the job's creation was answered: due to reach it unless its wait had ended.
        left = rows.left(str(job.pk), step)
        if left is None or paid.received_at < left - MARGIN:
            missed += 1
            examples["events_not_reaching_their_waiting_job"].append(
                f"{order.paid_id} -> {job.pk} (left {left})"
            )
    foreign = []
    left_waiting = []
    for job_id, job in rows.jobs.items():
        if job.workflow.name != WORKFLOW_ORDER:
            continue
        events = [s for s in rows.signals[job_id] if s.name == f"event:{PAID}"]
        foreign += [
            f"{job_id} took {s.payload}"
            for s in events
            if not isinstance(s.payload, dict)
            or s.payload.get("data", {}).get("order_id") != job.input.get("order_id")
        ]
        step = rows.step(job_id, PAID_STEP)
        if step is not None and step.status != StepStatus.SUCCEEDED and rows.waited(job_id, step):
            left_waiting += [
                f"{job_id}: {step.status}, signal {s.pk}" for s in events if s.consumed_at is None
            ]
    examples["events_taken_by_another_orders_job"] += foreign
    examples["jobs_left_waiting_for_an_event_sent_to_them"] += left_waiting
    ghosts = [rows.inbound[f"{PAYMENTS}/{g}"] for g in log.ghosts if f"{PAYMENTS}/{g}" in rows.inbound]
    return {
        "orders_by_mode": dict(Counter(o.mode for o in log.orders)),
        "payments_by_mode": dict(sorted(reached.items())),
        "ghost_payments": len(ghosts),
        "ghost_payments_reaching_a_job": sum(1 for g in ghosts if g.answer.get("signalled")),
        "orders_with_more_than_one_job": len(several),
        "events_not_reaching_their_waiting_job": missed,
        "events_taken_by_another_orders_job": len(foreign)
        + sum(1 for g in ghosts if g.answer.get("signalled")),
        "jobs_left_waiting_for_an_event_sent_to_them": len(left_waiting),
    }


def _consumption(rows: _Rows, examples: dict[str, list[str]]) -> dict[str, Any]:
    """Each signal taken by one step once, each step signalled once; a signal `go` left untaken
    on a job only when every step taking it took another."""
    by_signal: Counter[Any] = Counter()
    by_step: Counter[Any] = Counter()
    for events in rows.history.values():
        for e in events:
            if e["kind"] == EventKind.STEP_SIGNALLED:
                by_signal[e["data"].get("signal_id")] += 1
                by_step[e["step_id"]] += 1
    twice = [s for s, n in by_signal.items() if n > 1]
    examples["signals_consumed_more_than_once"] += [str(s) for s in twice]
    steps_twice = [s for s, n in by_step.items() if n > 1]
    examples["steps_signalled_more_than_once"] += [str(s) for s in steps_twice]
    untaken = []
    for job_id, signals in rows.signals.items():
        takers = [s for s in rows.steps[job_id] if s.name in GO_STEPS]
        left = [s for s in signals if s.name == GO and s.consumed_at is None]
        if left and any(s.status != StepStatus.SUCCEEDED for s in takers):
            untaken.append(f"{job_id}: {[(s.name, s.status) for s in takers]}, {len(left)} left")
    examples["signals_not_taken_by_their_waiting_step"] += untaken
    consumed = sum(1 for signals in rows.signals.values() for s in signals if s.consumed_at is not None)
    return {
        "signals_stored": sum(len(s) for s in rows.signals.values()),
        "signals_consumed": consumed,
        "signals_consumed_more_than_once": len(twice),
        "steps_signalled_more_than_once": len(steps_twice),
        "signals_not_taken_by_their_waiting_step": len(untaken),
    }


def _by_key(log: EventLog, rows: _Rows, examples: dict[str, list[str]]) -> dict[str, Any]:
    """Signals by key: claimed by one job at most, each delivery stored; an early one taken by
    the job made with its key within the lookback; a late one taken by none."""
    claims: dict[int, list[str]] = defaultdict(list)
    claim_signal: dict[int, int] = {}
    for job_id, events in rows.history.items():
        for e in events:
            if e["kind"] == EventKind.SIGNAL_RECEIVED and e["data"].get("keyed_signal") is not None:
                claims[e["data"]["keyed_signal"]].append(job_id)
                claim_signal[e["data"]["keyed_signal"]] = e["data"].get("signal_id")
    twice = [k for k, jobs in claims.items() if len(jobs) > 1]
    examples["keyed_signals_claimed_more_than_once"] += [f"{k}: {claims[k]}" for k in twice]
    lost = []
    for key, keyed in rows.keyed.items():
        for job in keyed.reached:
            if not any(s.idempotency_key == f"by-key:{key}" for s in rows.signals.get(job, [])):
                lost.append(f"{key} -> {job}")
        if keyed.consumed_job_id is not None and claims.get(keyed.pk) != [str(keyed.consumed_job_id)]:
            lost.append(f"{key} claimed by {keyed.consumed_job_id}, received by {claims.get(keyed.pk)}")
    examples["keyed_signals_delivered_without_their_signal"] += lost
    early = [(k, rows.keyed.get(k.keys.get("early", ""))) for k in log.keyed if k.mode == "early"]
    consumed = outlived = not_consumed = 0
    for plan, sent in early:
        job = rows.jobs.get(plan.job_id or "")
        if sent is None or job is None:
            continue
        if sent.expires_at is not None and job.created_at >= sent.expires_at:
            outlived += 1  # the job came after the lookback: it may not take it
            continue
        signal = claim_signal.get(sent.pk)
        taken = any(s.pk == signal and s.consumed_at is not None for s in rows.signals[str(job.pk)])
        if sent.consumed_job_id == job.pk and taken:
            consumed += 1
        else:
            not_consumed += 1
            examples["early_signals_not_consumed_by_their_job"].append(f"{plan.business_key}: {job.pk}")
    late = [rows.keyed[k.keys["late"]] for k in log.keyed if k.keys.get("late") in rows.keyed]
    taken_late = [k for k in late if k.reached or k.consumed_job_id is not None]
    examples["late_signals_taken"] += [
        f"{k.business_key}: {k.reached} {k.consumed_job_id}" for k in taken_late
    ]
    on_time = [rows.keyed[k.keys["on_time"]] for k in log.keyed if k.keys.get("on_time") in rows.keyed]
    return {
        "keyed_signals": len(rows.keyed),
        "keyed_signals_buffered": sum(1 for k in rows.keyed.values() if k.buffered),
        "keyed_signals_claimed": sum(1 for k in rows.keyed.values() if k.consumed_job_id is not None),
        "keyed_signals_expired": sum(1 for k in rows.keyed.values() if k.expired_at is not None),
        "early_signals": len(early),
        "early_signals_consumed": consumed,
        "early_signals_outlived_by_their_job": outlived,
        "on_time_signals_reaching_their_job": sum(1 for k in on_time if k.reached),
        "late_signals": len(late),
        "late_signals_expired": sum(1 for k in late if k.expired_at is not None),
        "late_signals_still_kept": sum(1 for k in late if k.expired_at is None and not taken_late),
        "keyed_signals_claimed_more_than_once": len(twice),
        "keyed_signals_delivered_without_their_signal": len(lost),
        "early_signals_not_consumed_by_their_job": not_consumed,
        "late_signals_taken": len(taken_late),
    }


def _races(log: EventLog, rows: _Rows, examples: dict[str, list[str]]) -> dict[str, Any]:
    """Signal-with-start from two clients at once: one job of the key at a time, each request's
    signal on the job it was answered with, and no key's signal on two jobs."""
    two = after_end = lost = 0
    codes: Counter[int] = Counter()
    holders: dict[str, set[str]] = defaultdict(set)
    for job_id, signals in rows.signals.items():
        for s in signals:
            if (s.idempotency_key or "").startswith("with-start:"):
                holders[s.idempotency_key or ""].add(job_id)
    for race in log.races:
        codes.update(code for code, _ in race.answers)
        jobs = sorted(
            (j for j in rows.jobs.values() if j.business_key == race.business_key), key=lambda j: j.created_at
        )
        if len(jobs) > 1:
            ended = jobs[0].finished_at
            if ended is not None and jobs[1].created_at > ended:
                after_end += 1  # a request that came once the first job had ended starts another
            else:
                two += 1
                examples["race_pairs_with_two_jobs"].append(race.business_key)
        for (code, job), key in zip(race.answers, race.keys, strict=True):
            if job is not None and job not in holders.get(f"with-start:{key}", set()):
                lost += 1
                examples["with_start_signals_lost"].append(f"{key} -> {job} ({code})")
    made = {
        str(j.idempotency_key): str(pk)
        for pk, j in rows.jobs.items()
        if j.workflow.name == WORKFLOW_WITH_START
    }
    split = [
        key
        for key, jobs in holders.items()
        if len(jobs) > 1
        or (key.removeprefix("with-start:") in made and made[key.removeprefix("with-start:")] not in jobs)
    ]
    examples["with_start_keys_on_two_jobs"] += [f"{k}: {sorted(holders[k])}" for k in split]
    one = sum(
        1
        for race in log.races
        if sum(1 for j in rows.jobs.values() if j.business_key == race.business_key) == 1
    )
    return {
        "race_pairs": len(log.races),
        "race_pairs_with_one_job": one,
        "race_answers_by_status": {str(c): n for c, n in sorted(codes.items())},
        "race_pairs_second_job_after_the_first_ended": after_end,
        "race_pairs_with_two_jobs": two,
        "with_start_signals_lost": lost,
        "with_start_keys_on_two_jobs": len(split),
    }


def table_rows(events: dict[str, Any]) -> list[tuple[str, Any]]:
    f = events["figures"]

    def of(*names: str) -> str:
        return " / ".join(str(f[n]) for n in names)

    rows: list[tuple[str, Any]] = [
        (
            "events rounds / requests sent again / first answers lost",
            of("events_rounds", "events_requests_sent_again", "events_answers_cut"),
        ),
        ("events jobs by workflow", f["events_jobs_by_workflow"]),
        ("events jobs by status", f["events_jobs_by_status"]),
        (
            "events posted / answers / duplicates answered / posted twice at once",
            of("events_posted", "event_answers", "duplicates_answered", "events_posted_twice_at_once"),
        ),
        ("payments by how their order's events came", f["payments_by_mode"]),
        (
            "payments for orders without a job / reaching a job",
            of("ghost_payments", "ghost_payments_reaching_a_job"),
        ),
        ("signals stored / consumed", of("signals_stored", "signals_consumed")),
        (
            "signals by key / kept / claimed / expired",
            of("keyed_signals", "keyed_signals_buffered", "keyed_signals_claimed", "keyed_signals_expired"),
        ),
        (
            "early signals / consumed by their job / job after the lookback",
            of("early_signals", "early_signals_consumed", "early_signals_outlived_by_their_job"),
        ),
        ("on-time signals reaching their job", f["on_time_signals_reaching_their_job"]),
        (
            "late signals / expired / still kept",
            of("late_signals", "late_signals_expired", "late_signals_still_kept"),
        ),
        (
            "racing pairs / with one job / second job after the first ended",
            of("race_pairs", "race_pairs_with_one_job", "race_pairs_second_job_after_the_first_ended"),
        ),
        ("racing submissions by answer", f["race_answers_by_status"]),
        ("events actions not sent (their job never came to wait or end)", f["events_actions_not_sent"]),
    ]
    return rows + [(f"{name.replace('_', ' ')} (must be 0)", f[name]) for name in MUST_BE_ZERO]
