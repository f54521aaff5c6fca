"""The fault campaign behind `manage.py fault_campaign`.

It starts its own sandbox remote and several `qcluster` processes on the configured database,
submits jobs of a workflow with a parallel branch and compensations, and meanwhile injects faults:
remote errors, declines, latency beyond the deadline, "commit then drop the answer", SIGKILL of a
random cluster (the acting supervisor among them) with a restart, a dropped database connection
under a worker, two operator retries of one step at the same moment, a database write that
commits and then reports an error, and (given a data directory it may control) immediate-mode
restarts of PostgreSQL. With the asynchronous agents (the default), half the jobs run a workflow
whose charge the remote answers later (202, then a callback to the web server) and whose shipping
goes through a queue on a real Redis; their faults are lost, repeated, late and unknown replies
and callbacks, and restarts of the broker that lose what it held. A share of the jobs run a
workflow with a timer, a signal and an approval (`testbed.campaign_waits`), signalled and decided
over the REST API with duplicated, early, late and extra signals and double-clicked approvals,
and once every cluster is stopped at the same time while timers come due. A share run workflows
in the workflow language (`testbed.campaign_language`): a condition, a fan-out over the order's
lines and a sub-workflow. With `poison=True` (`testbed.campaign_poison`), after a first phase
without it, what one tenant submits, one remote answers or one producer publishes to stop every
job's supervision, and a supervisor that renews its lease while its remediation fails; the
healthy jobs' remediation lag is read by phase. Then it stops the
faults, waits for every job to settle, and checks the invariants of docs/architecture.md against the database
and the remote's own ledger.

Many hosts (`pgbouncer=True`, `webs=N`): every cluster and web process reaches the database through
a real PgBouncer in transaction pooling mode, and the jobs are submitted through the REST API of
the web processes in turn (under gunicorn with `gunicorn=True`, as in production). The lease's
durable record (its finished terms, and the holder named by every supervisor decision, in commit
order) must show one acting supervisor at a time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import shlex
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import OperationalError, close_old_connections, connection
from django.utils import timezone

from sas_project.conf import sas_settings
from sas_project.database import is_postgresql
from sas_project.errors import SasError
from sas_project.permissions import role_groups_ensure
from sas_project.tokens.services import token_create
from scheduler.definitions import workflow_create, workflow_latest
from scheduler.models import Attempt, Event, Job, JobStatus, Step, StepKind, StepStatus
from scheduler.services import job_submit
from scheduler.transitions import (
    JOB_OPERATOR_ONLY,
    JOB_TRANSITIONS,
    KEY_HOLDING,
    STEP_OPERATOR_ONLY,
    STEP_TRANSITIONS,
    STEP_WAIT_COMPLETIONS,
)
from supervisor.deliveries import claim_seconds
from supervisor.lease import LEASE_NAME
from supervisor.models import LeaseTerm, SupervisorLease
from supervisor.services import step_retry
from testbed import (
    campaign_bombs,
    campaign_events,
    campaign_events_checks,
    campaign_flow,
    campaign_hostile,
    campaign_language,
    campaign_loops,
    campaign_loops_checks,
    campaign_poison,
)
from testbed.campaign_language import (
    AMOUNT_LIMIT,
    QUANTITY_LIMIT,
    LanguagePlanner,
    check_language,
    held_child_parents,
)
from testbed.campaign_waits import (
    WORKFLOW_WAITS,
    Blackout,
    Planner,
    WaitDriver,
    WaitRates,
    check_waits,
    ensure_wait_definitions,
    table_rows,
)
from testbed.definitions import ensure_policy, ensure_pool, ensure_workflow, refuse_foreign_jobs
from testbed.processes import (
    ROOT,
    ClusterProcess,
    PgBouncerProcess,
    RedisProcess,
    SandboxProcess,
    WebProcess,
    free_port,
    percentile,
)
from testbed.resend import post_until_answered

WORKFLOW = "campaign_order"
#: The same order with a charge answered later and shipping through a queue.
WORKFLOW_ASYNC = "campaign_order_async"
#: The same order with at most KEY_LIMIT jobs at once per account (a concurrency key).
WORKFLOW_KEYED = "campaign_order_keyed"
KEY_LIMIT = 2
SETTLED = {
    JobStatus.SUCCEEDED,
    JobStatus.COMPENSATED,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.NEEDS_ATTENTION,
}
APP_PREFIX = "sas-campaign"


#: The longest the driver submits before it looks at the faults that are due again (seconds).
SUBMIT_SLICE = 0.5
#: The bombs' flood starts after this share of the faults: the ordinary submissions before it
#: are the run's own baseline.
BOMBS_FROM = 0.25
#: After a PostgreSQL restart, how long a web process may still answer 5xx (seconds).
RESTART_GRACE = 3.0
#: Jobs held back until a stuck supervisor's peers start (its window drops their first calls).
STUCK_PROBES = 2
#: For the first LAG_PROBE_SECONDS of the poison, a healthy job every LAG_PROBE_EVERY seconds
#: loses its calls' first answers (the sandbox's `input.drops`): its steps come due unanswered
#: whatever the fault rates and the machine's pace, and no PostgreSQL restart is made until they
#: were decided, so that the remediation lag with the poison on is measured for certain.
LAG_PROBE_EVERY = 1.5
LAG_PROBE_SECONDS = 6.0


@dataclass
class CampaignConfig:
    jobs: int = 60
    duration: float = 20.0
    drain: float = 60.0
    clusters: int = 2
    workers: int = 3
    seed: int = 1
    error_rate: float = 0.05
    decline_rate: float = 0.05
    latency_rate: float = 0.03
    drop_rate: float = 0.05
    kill_every: float = 6.0
    db_drop_every: float = 4.0
    operator_every: float = 3.0
    commit_error_rate: float = 0.005
    pg_restart: bool = False
    pg_restart_min: float = 5.0
    pg_restart_max: float = 40.0
    timeout_seconds: float = 3.0
    supervisor_interval: float = 1.0
    #: Also run the asynchronous agents (HTTP 202 + callback, a queue on Redis) with their faults.
    async_agents: bool = True
    #: Share of asynchronous results lost, repeated, late, and followed by an unknown one (each).
    reply_fault_rate: float = 0.1
    broker_restart_every: float = 12.0
    async_delay_ms: int = 200
    artifacts: Path = field(default_factory=lambda: ROOT / "var" / "campaign")
    #: Run even though the database holds jobs this campaign did not create.
    scratch: bool = False
    #: Clusters and web processes reach the database through PgBouncer (transaction pooling).
    pgbouncer: bool = False
    #: Web processes the jobs are submitted through (the REST API, in turn); 0: in-process.
    webs: int = 0
    #: The web processes run under gunicorn with the production configuration (not runserver).
    gunicorn: bool = False
    #: Share of the jobs that run the workflow with a timer, a signal and an approval (0: none).
    wait_share: float = 0.25
    #: Shares of those jobs whose signal is sent three times at once under one Idempotency-Key,
    #: sent before the step waits, never sent in time (then sent late), followed by a second one
    #: under another key; that are signalled again once ended; whose approval is clicked twice at
    #: once (half of them an approval racing a rejection).
    signal_duplicate_rate: float = 0.3
    signal_early_rate: float = 0.15
    signal_late_rate: float = 0.15
    signal_extra_rate: float = 0.15
    settled_signal_rate: float = 0.25
    approval_race_rate: float = 0.3
    #: Seconds every cluster is down at once, halfway through the faults, while timers come due
    #: (0: never).
    blackout_seconds: float = 4.0
    #: Share of the jobs that run the workflows with a condition, a fan-out and a sub-workflow
    #: (0: none).
    language_share: float = 0.2
    #: The hostile mode (testbed.campaign_hostile): hostile answers, callback receivers and
    #: poison on the reply queue.
    hostile: bool = False
    #: Share of the remote's answers that are hostile (the work done first).
    hostile_rate: float = 0.1
    #: Seconds between two poison messages on the reply queue.
    poison_every: float = 1.0
    #: Poison beside the healthy jobs after a first phase without it (testbed.campaign_poison):
    #: impossible times, NaN, unpaired surrogates, compression bombs and deep strings on the reply
    #: queue, black-holed callback receivers, a supervisor whose remediation fails.
    poison: bool = False
    #: Poison jobs (their kinds in turn), and jobs calling back to a black hole (one host each).
    poison_jobs: int = 24
    blackholes: int = 1000
    #: The longest the supervisor whose remediation fails holds out before the window ends
    #: without a takeover (seconds; 0: no such supervisor).
    stuck_window: float = 30.0
    #: With `hostile`: contract and expression bombs (testbed.campaign_bombs), the refused
    #: definitions and a flood of bomb jobs over the REST API beside the ordinary submissions,
    #: which then go through the API too (their latency is read with and without the flood).
    bombs: bool = True
    #: Bomb requests per second in the flood (0: the definitions only, no flood).
    bomb_rate: float = 4.0
    #: Accounts the keyed order's jobs spread over, KEY_LIMIT at once each (0: no keyed jobs).
    keys: int = 4
    #: Flow control by key beside the other jobs (testbed.campaign_flow): a call step's
    #: concurrency and rate, a debounce, a throttle, and cancels sent to the remote.
    flow: bool = True
    #: Events and correlation beside the other jobs (testbed.campaign_events): inbound events
    #: duplicated and reordered, signals by business key early and late, signal-with-start racing.
    events: bool = True
    #: Language II beside the other jobs (testbed.campaign_loops): poll-until loops, approvals
    #: whose wait escalates, and sub-workflow steps whose failed children are retried.
    loops: bool = True


# --- definitions ----------------------------------------------------------------------------------


def ensure_definitions(sandbox_url: str, cfg: CampaignConfig, broker_url: str = "") -> None:
    """Pools at the sandbox, the campaign's policies and its workflow (reserve, then charge and
    schedule in parallel, each with a compensation and a status path); with a broker, the same
    workflow with the charge answered later and the schedule sent on a queue."""
    backup_url = sandbox_url.replace("127.0.0.1", "localhost")
    ensure_pool("campaign-inventory", kind="http", endpoints=[sandbox_url])
    ensure_pool("campaign-payments-backup", kind="http", endpoints=[backup_url])
    ensure_pool(
        "campaign-payments", kind="http", endpoints=[sandbox_url], alternate="campaign-payments-backup"
    )
    ensure_pool("campaign-shipping", kind="http", endpoints=[sandbox_url])
    common = {
        "timeout_seconds": cfg.timeout_seconds,
        "max_attempts": 8,
        "backoff_initial_seconds": 0.2,
        "backoff_multiplier": 2.0,
        "backoff_max_seconds": 2.0,
        "backoff_jitter": 0.5,
        "retry_on": ["transient_failure", "no_answer"],
        "on_exhausted": "compensate",
    }
    ensure_policy("campaign", **common, reconcile_before_retry=False)
    ensure_policy("campaign-careful", **common, reconcile_before_retry=True, reassign_after_attempts=3)
    order: list[dict[str, Any]] = [
        {
            "name": "reserve",
            "pool": "campaign-inventory",
            "path": "/inventory/reserve",
            "status_path": "/inventory/reservations/{operation_id}",
            "compensation_path": "/inventory/release",
            "policy": "campaign",
        },
        {
            "name": "charge",
            "pool": "campaign-payments",
            "path": "/payments/charge",
            "status_path": "/payments/{operation_id}",
            "compensation_path": "/payments/refund",
            "depends_on": ["reserve"],
            "policy": "campaign-careful",
        },
        {
            "name": "schedule",
            "pool": "campaign-shipping",
            "path": "/shipping/schedule",
            "status_path": "/shipping/shipments/{operation_id}",
            "compensation_path": "/shipping/cancel",
            "depends_on": ["reserve"],
            "policy": "campaign",
        },
    ]
    ensure_workflow(
        WORKFLOW,
        description="Reserve, then charge and schedule in parallel; every step undoable.",
        steps=order,
    )
    if workflow_latest(WORKFLOW_KEYED) is None:
        workflow_create(
            name=WORKFLOW_KEYED,
            description="The order, at most two at once per account.",
            steps=order,
            concurrency={"key": "input.account", "limit": KEY_LIMIT},
        )
    if not broker_url:
        return
    ensure_pool("campaign-queue", kind="queue", endpoints=[broker_url])
    ensure_workflow(
        WORKFLOW_ASYNC,
        description="Reserve, then a charge answered later and a schedule sent on a queue.",
        steps=[
            {
                "name": "reserve",
                "pool": "campaign-inventory",
                "path": "/inventory/reserve",
                "status_path": "/inventory/reservations/{operation_id}",
                "compensation_path": "/inventory/release",
                "policy": "campaign",
            },
            {
                "name": "charge",
                "pool": "campaign-payments",
                "path": "/async/payments/charge",
                "status_path": "/payments/{operation_id}",
                "compensation_path": "/payments/refund",
                "depends_on": ["reserve"],
                "policy": "campaign-careful",
            },
            {
                "name": "schedule",
                "pool": "campaign-queue",
                "path": "shipping.schedule",
                "status_path": "shipping.status",
                "compensation_path": "shipping.cancel",
                "depends_on": ["reserve"],
                "policy": "campaign",
            },
        ],
    )


# --- the run -------------------------------------------------------------------------------------


@dataclass
class FaultLog:
    kills: int = 0
    restarts_of_postgres: int = 0
    connections_dropped: int = 0
    operator_pairs: int = 0
    operator_pairs_one_effect: int = 0
    operator_pairs_violating: int = 0
    operator_errors: int = 0
    submit_errors: int = 0
    broker_restarts: int = 0
    cluster_blackouts: int = 0
    #: Healthy jobs made, while the poison ran, to lose their calls' first answers (LAG_PROBE_EVERY).
    lag_probes: int = 0
    notes: list[str] = field(default_factory=list)


def _db_retry(fn: Callable[[], Any], attempts: int = 60) -> Any:
    """Run a database read through a PostgreSQL restart: reconnect and try again."""
    for _ in range(attempts):
        try:
            return fn()
        except OperationalError:
            connection.close()
            time.sleep(0.5)
    return fn()


def _operator() -> Any:
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username="campaign-operator")
    return user


def _double_retry(fault: FaultLog, rng: random.Random, job_ids: list[Any]) -> None:
    """Two operators click Retry on the same step at the same moment."""
    candidates = list(
        Step.objects.filter(
            job_id__in=job_ids,
            status__in=[
                StepStatus.HELD,
                StepStatus.RETRY_WAIT,
                StepStatus.UNKNOWN,
                StepStatus.ATTEMPT_FAILED,
            ],
        ).values_list("pk", "attempt")[:50]
    )
    if not candidates:
        return
    step_id, attempt_before = rng.choice(candidates)
    user = _operator()
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def click() -> None:
        try:
            barrier.wait(5)
            step_retry(actor=user, step_id=step_id, reason="campaign: concurrent retry")
            outcomes.append("ok")
        except SasError:
            outcomes.append("refused")
        except Exception:  # noqa: BLE001 - an injected or real database error: counted
            outcomes.append("error")
        finally:
            connection.close()

    threads = [threading.Thread(target=click) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fault.operator_pairs += 1
    fault.operator_errors += outcomes.count("error")
    new_attempts = Attempt.objects.filter(step_id=step_id, number__gt=attempt_before).count()
    successes = outcomes.count("ok")
    # Between the pick and the clicks the supervisor may also have retried the step.
    if successes > 1:
        fault.operator_pairs_violating += 1
    elif successes == 1 and new_attempts >= 1:
        fault.operator_pairs_one_effect += 1


def _drop_connection(fault: FaultLog, rng: random.Random) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
            [f"{APP_PREFIX}-%"],
        )
        pids = [r[0] for r in cursor.fetchall()]
        if pids:
            cursor.execute("SELECT pg_terminate_backend(%s)", [rng.choice(pids)])
            fault.connections_dropped += 1


def _restart_postgres(fault: FaultLog) -> None:
    bindir = os.environ.get("SAS_PG_BINDIR", "")
    datadir = os.environ.get("SAS_PG_DATADIR", "")
    runas = shlex.split(os.environ.get("SAS_PG_RUNAS", ""))
    options = os.environ.get("SAS_PG_OPTIONS", "")
    log = os.environ.get("SAS_PG_LOG", "/dev/null")
    cmd = [
        *runas,
        str(Path(bindir) / "pg_ctl"),
        "-D",
        datadir,
        "-m",
        "immediate",
        "-w",
        "-t",
        "60",
        "-l",
        log,
        "restart",
    ]
    if options:
        cmd[len(runas) + 3 : len(runas) + 3] = ["-o", options]
    connection.close()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fault.restarts_of_postgres += 1


def _reply_faults(cfg: CampaignConfig, *, on: bool) -> dict[str, Any]:
    """The sandbox's faults of results reported later (no-ops without asynchronous agents)."""
    rate = cfg.reply_fault_rate if on and cfg.async_agents else 0.0
    return {
        "reply_loss_rate": rate,
        "reply_duplicate_rate": rate,
        "reply_late_rate": rate,
        # Later than the deadline: the answer to an attempt the supervisor already gave up on.
        "reply_late_ms": int(cfg.timeout_seconds * 1500),
        "reply_unknown_rate": rate,
    }


def allow_callbacks_to(network: str) -> None:
    """Let completion callbacks reach `network` (SAS_CALLBACK_INTERNAL_HOSTS), in this process and
    the processes it starts."""
    from django.conf import settings

    names = [n for n in os.environ.get("SAS_CALLBACK_INTERNAL_HOSTS", "").split(",") if n.strip()]
    if network not in names:
        names.append(network)
    os.environ["SAS_CALLBACK_INTERNAL_HOSTS"] = ",".join(names)
    settings.SAS_CALLBACK_INTERNAL_HOSTS = names


def database_url() -> str:
    """The URL of the database this process uses (the campaign's children use the same one)."""
    s = connection.settings_dict
    user = s.get("USER") or "postgres"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


def api_token() -> str:
    """A submitter's API token, as a client system holds one."""
    role_groups_ensure()
    user, _ = get_user_model().objects.get_or_create(username="campaign-client")
    user.groups.add(Group.objects.get(name="submitters"))
    _, key = token_create(user=user, name="campaign")
    return key


class ApiSubmitter:
    """Submits jobs through the REST API of several web processes, in turn. A submission whose
    answer was lost is sent again with the same idempotency key, which returns the same job."""

    def __init__(self, urls: list[str], token: str) -> None:
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.clients = [httpx.Client(base_url=u, headers=headers, timeout=30, trust_env=False) for u in urls]
        self.sent = 0
        #: Each accepted submission: (when it was first sent, monotonic; seconds until accepted,
        #: sent again after a 5xx or a dropped connection included).
        self.latencies: list[tuple[float, float]] = []

    def submit(self, workflow: str, payload: dict[str, Any], key: str, callback_url: str = "") -> str:
        body: dict[str, Any] = {"workflow": workflow, "input": payload}
        if callback_url:
            body["callback_url"] = callback_url
        first = time.monotonic()
        # Each try through the next web process; anything but a job (a 409 of a request still in
        # progress, a 429) is sent again too.
        sent = post_until_answered(
            self._next_client, "/api/v1/jobs/", body, key=key, taken=lambda r: r.status_code in (200, 201)
        )
        if sent.response is None:
            raise RuntimeError(f"submitting through the API failed: {sent.error}")
        self.latencies.append((first, time.monotonic() - first))
        return str(sent.response.json()["id"])

    def _next_client(self) -> httpx.Client:
        client = self.clients[self.sent % len(self.clients)]
        self.sent += 1
        return client

    def close(self) -> None:
        for client in self.clients:
            client.close()


def approver_token() -> str:
    """An operator's API token: the approvals of the wait jobs name no group, so operators decide."""
    role_groups_ensure()
    user, _ = get_user_model().objects.get_or_create(username="campaign-approver")
    user.groups.add(Group.objects.get(name="operators"))
    _, key = token_create(user=user, name="campaign")
    return key


def wait_rates(cfg: CampaignConfig) -> WaitRates:
    return WaitRates(
        duplicate=cfg.signal_duplicate_rate,
        early=cfg.signal_early_rate,
        late=cfg.signal_late_rate,
        extra=cfg.signal_extra_rate,
        settled=cfg.settled_signal_rate,
        approval_race=cfg.approval_race_rate,
    )


def _spread(index: int, share: float) -> bool:
    """Whether item `index` is among a `share` of the items, spread evenly (no clusters)."""
    return share > 0 and int((index + 1) * share) > int(index * share)


def _not_before(rng: random.Random, now: float, blackout: tuple[float, float] | None) -> tuple[str, float]:
    """The time a wait job's timer waits for, as ISO 8601 with its offset and as a monotonic time:
    inside `blackout` (monotonic start and end of the window when every cluster is down) when
    given, otherwise 0.5 to 5 s from now."""
    if blackout is not None:
        start, end = blackout
        ahead = start - now + rng.uniform(0.2, max(0.3, end - start - 0.5))
    else:
        ahead = rng.uniform(0.5, 5.0)
    return (timezone.now() + dt.timedelta(seconds=ahead)).isoformat(), time.monotonic() + ahead


def _blackout_end(start: float, seconds: float, aimed: list[float]) -> float:
    """When every cluster starts again after stopping at `start` (monotonic): `seconds` later, or
    later still until the first timer aimed at the window and not yet due has come due, so a
    blackout that began late (a slow fault before it) still has a timer due while it lasts."""
    ahead = [due for due in aimed if due > start + 0.1]
    end = start + seconds
    if ahead and min(ahead) + 0.5 > end:
        end = min(ahead) + 0.5
    return end


def run_campaign(cfg: CampaignConfig, log: Callable[[str], None]) -> dict[str, Any]:
    if not is_postgresql():
        raise RuntimeError("the fault campaign runs on PostgreSQL (set DATABASE_URL)")
    if cfg.pg_restart and not os.environ.get("SAS_PG_DATADIR"):
        raise RuntimeError("--pg-restart needs SAS_PG_DATADIR, SAS_PG_BINDIR (and SAS_PG_RUNAS as root)")
    own = [WORKFLOW, WORKFLOW_ASYNC, WORKFLOW_KEYED, WORKFLOW_WAITS, *campaign_language.ALL_WORKFLOWS]
    own += [*campaign_poison.ALL_WORKFLOWS, *campaign_bombs.ALL_WORKFLOWS, *campaign_flow.ALL_WORKFLOWS]
    own += [*campaign_events.ALL_WORKFLOWS, *campaign_loops.ALL_WORKFLOWS]
    bombing = cfg.hostile and cfg.bombs
    # The bombs' flood is measured against the ordinary submissions, which go through the API.
    api_webs = max(cfg.webs, 1) if bombing else cfg.webs
    refuse_foreign_jobs("fault_campaign", own, scratch=cfg.scratch)
    rng = random.Random(cfg.seed)
    cfg.artifacts.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:8]
    sandbox = SandboxProcess(
        port=free_port(),
        db=cfg.artifacts / f"sandbox-{run_id}.sqlite3",
        log=cfg.artifacts / f"sandbox-{run_id}.log",
    )
    redis: RedisProcess | None = None
    bouncer: PgBouncerProcess | None = None
    webs: list[WebProcess] = []
    submitter: ApiSubmitter | None = None
    if cfg.poison and cfg.blackholes:
        # The black holes listen on loopback addresses of their own, which callbacks may reach
        # only when named (the web processes and clusters inherit this).
        allow_callbacks_to("127.0.0.0/8")
    # What every child process shares: the database, directly or through PgBouncer.
    base_env = dict(os.environ)
    if cfg.pgbouncer:
        bouncer = PgBouncerProcess.in_front_of(database_url(), cfg.artifacts / f"pgbouncer-{run_id}").start()
        base_env |= {"DATABASE_URL": bouncer.url_for(database_url()), "SAS_DB_TRANSACTION_POOLING": "1"}
    if cfg.events:
        # The late signals by key expire while the campaign runs (an hour by default).
        base_env["SAS_SIGNAL_LOOKBACK_SECONDS"] = str(campaign_events.LOOKBACK_SECONDS)
    if cfg.async_agents:
        redis = RedisProcess(port=free_port(), log=cfg.artifacts / f"redis-{run_id}.log").start()
        sandbox.start("--broker", redis.url, "--async-delay-ms", str(cfg.async_delay_ms), seed=cfg.seed)
    else:
        sandbox.start(seed=cfg.seed)
    # The web processes: the API jobs are submitted through, and where the remote's callbacks
    # arrive and the wait jobs are signalled and decided (the first one).
    for i in range(
        max(
            api_webs,
            1
            if cfg.async_agents or cfg.wait_share > 0 or cfg.poison or cfg.flow or cfg.events or cfg.loops
            else 0,
        )
    ):
        webs.append(
            WebProcess(
                port=free_port(),
                env={
                    **base_env,
                    "SAS_LOG_LEVEL": "WARNING",
                    "SAS_THROTTLE_USER": "off",
                    "SAS_DB_APPLICATION_NAME": f"sas-web-{i}",
                    "PYTHONUNBUFFERED": "1",
                },
                log=cfg.artifacts / f"web-{run_id}-{i}.log",
                gunicorn=cfg.gunicorn,
            ).start()
        )
    web = webs[0] if webs else None
    client_token = (
        api_token()
        if api_webs or cfg.wait_share > 0 or cfg.poison or cfg.flow or cfg.events or cfg.loops
        else ""
    )
    if api_webs:
        submitter = ApiSubmitter([w.url for w in webs[:api_webs]], client_token)
    ensure_definitions(sandbox.url, cfg, redis.url if redis else "")
    flood: campaign_bombs.BombFlood | None = None
    bomb_log: campaign_bombs.BombLog | None = None
    #: The PostgreSQL restarts (monotonic, the grace after them included).
    restarts: list[tuple[float, float]] = []
    if bombing:
        campaign_bombs.ensure_bomb_definitions()
        flood = campaign_bombs.BombFlood(
            api_url=webs[0].url, tokens=campaign_bombs.bomber_tokens(), rate=cfg.bomb_rate, run_id=run_id
        )
    driver: WaitDriver | None = None
    wait_submitter: ApiSubmitter | None = None
    planner = Planner(random.Random(cfg.seed + 1), wait_rates(cfg))
    if cfg.wait_share > 0 and web is not None:
        ensure_wait_definitions()
        # The client system submits its wait jobs and signals them; an operator decides.
        wait_submitter = submitter or ApiSubmitter([web.url], client_token)
        driver = WaitDriver(url=web.url, client_token=client_token, approver_token=approver_token())
    workflows = [WORKFLOW, WORKFLOW_ASYNC] if cfg.async_agents else [WORKFLOW]
    if cfg.keys:
        workflows.append(WORKFLOW_KEYED)
    language = LanguagePlanner(random.Random(cfg.seed + 2))
    if cfg.language_share > 0:
        campaign_language.ensure_language_definitions()
    if cfg.poison:
        campaign_poison.ensure_poison_definitions()
    flow: campaign_flow.FlowDriver | None = None
    flow_submitter: ApiSubmitter | None = None
    flow_log: campaign_flow.FlowLog | None = None
    if cfg.flow and web is not None:
        campaign_flow.ensure_flow_definitions(timeout_seconds=cfg.timeout_seconds)
    if (cfg.flow or cfg.loops) and web is not None:
        flow_submitter = ApiSubmitter([web.url], client_token)
    events: campaign_events.EventDriver | None = None
    events_log: campaign_events.EventLog | None = None
    if cfg.events and web is not None:
        campaign_events.ensure_events_definitions()
    loops: campaign_loops.LoopsDriver | None = None
    loops_log: campaign_loops.LoopsLog | None = None
    if cfg.loops and web is not None:
        campaign_loops.ensure_loops_definitions()
    # The language jobs' share of the jobs that do not wait, so that they are `language_share`
    # of all.
    waiting = cfg.wait_share if driver is not None else 0.0
    language_of_rest = min(1.0, cfg.language_share / max(1.0 - waiting, 1e-9))
    handovers_before = (
        SupervisorLease.objects.filter(pk="supervisor").values_list("handovers", flat=True).first() or 0
    )
    first_event = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0
    first_term = LeaseTerm.objects.order_by("-id").values_list("id", flat=True).first() or 0
    receiver: campaign_hostile.HostileReceiver | None = None
    sampler: campaign_hostile.Sampler | None = None
    poison: campaign_hostile.PoisonPublisher | None = None
    #: Job id -> (callback mode, the tag its callback URL ends with).
    callbacks: dict[str, tuple[str, str]] = {}
    dead_before = campaign_hostile.dead_lettered()
    if cfg.hostile:
        receiver = campaign_hostile.HostileReceiver(free_port())
        sampler = campaign_hostile.Sampler()
        sampler.start()
        if redis is not None:
            poison = campaign_hostile.PoisonPublisher(redis.url, sas_settings.reply_queue)

    def cluster_env(index: int, faults: bool, *, remediation_fails: bool = False) -> dict[str, str]:
        env = {
            **base_env,
            "SAS_SUPERVISOR_INTERVAL": str(cfg.supervisor_interval),
            "SAS_LEASE_SECONDS": str(cfg.supervisor_interval * 3),
            "SAS_Q_WORKERS": str(cfg.workers),
            "SAS_Q_POLL": "0.1",
            "SAS_LOG_LEVEL": "WARNING",
            "SAS_DB_APPLICATION_NAME": f"{APP_PREFIX}-{index}",
            "SAS_FAULT_COMMIT_ERROR_RATE": str(cfg.commit_error_rate if faults else 0),
            "PYTHONUNBUFFERED": "1",
        }
        if web is not None:
            env["SAS_PUBLIC_URL"] = web.url
        if remediation_fails:
            env["SAS_FAULT_REMEDIATION_FAILS"] = "1"
        return env

    clusters = [
        ClusterProcess(str(i), cluster_env(i, True), cfg.artifacts / f"qcluster-{run_id}-{i}.log")
        for i in range(cfg.clusters)
    ]
    for cluster in clusters:
        cluster.start()
    fault = FaultLog()
    job_ids: list[Any] = []
    wait_job_ids: list[Any] = []
    language_job_ids: list[Any] = []
    blackouts: list[Blackout] = []
    started = time.monotonic()
    if driver is not None:
        driver.start()
    if flow_submitter is not None and web is not None:
        # The flow jobs' rounds, from 15 % of the faults on and spread up to 75 %.
        rounds = campaign_flow.rounds_for(cfg.jobs)
        flow = campaign_flow.FlowDriver(
            submit=flow_submitter.submit,
            url=web.url,
            operator_token=approver_token(),
            rounds_at=[started + cfg.duration * (0.15 + 0.6 * r / rounds) for r in range(rounds)],
            run_id=run_id,
            seed=cfg.seed + 3,
        ).start()
    if cfg.loops and web is not None and flow_submitter is not None:
        # The loops', ladders' and children's rounds, from 20 % of the faults on and spread up to
        # 45 %: their waits, backoffs and rungs run through the kills and the blackout.
        rounds = campaign_loops.rounds_for(cfg.jobs)
        loops = campaign_loops.LoopsDriver(
            submit=flow_submitter.submit,
            url=web.url,
            rounds_at=[started + cfg.duration * (0.2 + 0.25 * r / rounds) for r in range(rounds)],
            run_id=run_id,
            seed=cfg.seed + 5,
        ).start()
    if cfg.events and web is not None:
        # The events' rounds, from 55 % of the faults on and spread up to 75 %: when every cluster
        # goes down at half-time, the first round's events come while none runs (its jobs wait
        # for the restart), and the first half, whose calls meet the remote's first reply faults,
        # is left to the other jobs. Two clients, on two web processes when there are.
        rounds = campaign_events.rounds_for(cfg.jobs)
        events = campaign_events.EventDriver(
            urls=[w.url for w in webs[:2]],
            token=client_token,
            rounds_at=[started + cfg.duration * (0.55 + 0.2 * r / rounds) for r in range(rounds)],
            run_id=run_id,
            seed=cfg.seed + 4,
        ).start()
    started_at = timezone.now()
    holes: campaign_poison.BlackHoles | None = None
    poisoner: campaign_poison.PoisonDriver | None = None
    poison_log: campaign_poison.PoisonLog | None = None
    poison_from: dt.datetime | None = None
    stuck = campaign_poison.StuckSupervisor(
        clusters,
        env=lambda faulty: cluster_env(0, True, remediation_fails=faulty),
        sandbox=sandbox,
        limit=cfg.stuck_window,
    )
    #: The faults go on a few seconds after the stuck supervisor's window, for the holder that
    #: took over to act before every cluster restarts.
    after_stuck = 0.0
    #: When the campaign itself stopped supervisors or the database, until a supervisor could act
    #: again (the lease's expiry and a cluster's start after it): the healthy jobs' lag is read
    #: apart for deadlines inside them.
    outages: list[tuple[dt.datetime, dt.datetime]] = []
    # A peer takes the lease once it expired (three intervals) and acts at its next pass; a
    # cluster started again first has to start.
    takeover_after = dt.timedelta(seconds=cfg.supervisor_interval * 5)
    recovery = takeover_after + dt.timedelta(seconds=campaign_poison.CLUSTER_START_SECONDS)
    try:
        log(f"sandbox at {sandbox.url}; {cfg.clusters} clusters; faults on for {cfg.duration:.0f}s")
        sandbox.config(
            error_rate=cfg.error_rate,
            drop_rate=cfg.drop_rate,
            drop_hold_ms=int(cfg.timeout_seconds * 1500),
            latency_ms=int(cfg.timeout_seconds * 1500),
            latency_rate=cfg.latency_rate,
            decline_over=AMOUNT_LIMIT,
            decline_quantity_over=QUANTITY_LIMIT,
            hostile_rate=cfg.hostile_rate if cfg.hostile else 0.0,
            **_reply_faults(cfg, on=True),
        )
        submit_until = started + cfg.duration * 0.6
        next_kill = started + cfg.kill_every
        next_drop = started + cfg.db_drop_every
        next_operator = started + cfg.operator_every
        next_pg = started + rng.uniform(cfg.pg_restart_min, cfg.pg_restart_max)
        next_broker = started + cfg.broker_restart_every
        next_poison = started + cfg.poison_every
        bombs_at = started + cfg.duration * BOMBS_FROM if flood is not None else float("inf")
        if flood is not None:
            flood.define()
        # The poison after a first phase without it, spread over the next half of the faults;
        # the stuck supervisor once the blackout is over and the clusters are back.
        poison_at = started + cfg.duration * 0.2 if cfg.poison else float("inf")
        probe_until = poison_at + LAG_PROBE_SECONDS
        # No restart of the database from shortly before the probes until their steps' deadlines
        # (a dropped call is held 1.5 timeouts) and decisions (two intervals) are past.
        probes_quiet = (
            poison_at - 5.0,
            probe_until + cfg.timeout_seconds * 1.5 + 2 * cfg.supervisor_interval + 2.0,
        )
        stuck_at = started + cfg.duration * 0.6 if cfg.poison and cfg.stuck_window > 0 else float("inf")
        restart_queue: list[tuple[float, ClusterProcess]] = []
        # Every cluster down at once, halfway through the faults; the timers of the wait jobs
        # submitted shortly before come due meanwhile.
        blackout_at = started + cfg.duration * 0.5 if cfg.blackout_seconds > 0 else float("inf")
        blackout_end = blackout_at + cfg.blackout_seconds
        blackout: Blackout | None = None
        aimed: list[float] = []  # when the timers aimed at the blackout come due (monotonic)
        submitted = plain = rest = 0
        next_probe = 0.0
        while (
            time.monotonic() - started < cfg.duration
            or submitted < cfg.jobs
            or stuck.active
            or time.monotonic() < after_stuck
        ):
            now = time.monotonic()
            close_old_connections()
            try:
                if flood is not None and flood.log.flood is None and now >= bombs_at:
                    flood.start()
                    log(f"bombs on: {cfg.bomb_rate:g} a second")
                if poisoner is None and now >= poison_at and web is not None:
                    holes = (
                        campaign_poison.BlackHoles(cfg.blackholes, free_port()) if cfg.blackholes else None
                    )
                    poisoner = campaign_poison.PoisonDriver(
                        api_url=web.url,
                        token=client_token,
                        jobs=cfg.poison_jobs,
                        callbacks=cfg.blackholes,
                        holes=holes,
                        broker_url=redis.url if redis is not None else "",
                        reply_queue=sas_settings.reply_queue,
                        seconds=cfg.duration * 0.45,
                        run_id=run_id,
                    )
                    poison_from = timezone.now()
                    poisoner.start()
                    log(f"poison on: {cfg.poison_jobs} jobs, {cfg.blackholes} black-holed receivers")
                # After the blackout, if there is one: the two are not to overlap.
                blackout_over = blackout_at == float("inf") or (
                    blackout is not None
                    and blackout.up_at is not None
                    and timezone.now() > blackout.up_at + recovery
                )
                if (stuck.state == "off" and now >= stuck_at and blackout_over) or stuck.active:
                    if said := stuck.step(now):
                        log(said)
                    if stuck.active:
                        restart_queue.clear()  # the window decides which clusters run
                    else:
                        after_stuck = now + 5 * cfg.supervisor_interval
                due = cfg.jobs * min(1.0, (now - started) / max(submit_until - started, 0.001))
                # With a stuck supervisor to come, the last jobs wait for its peers: their first
                # calls are the ones the window drops, so a step is overdue while it holds the
                # lease whatever the machine's pace (its debt, which the takeover is timed from).
                held_back = (
                    STUCK_PROBES if stuck_at != float("inf") and stuck.state in ("off", "alone") else 0
                )
                while submitted < min(cfg.jobs - held_back, int(due) + 1):
                    if blackout is None and time.monotonic() >= blackout_at:
                        break  # the blackout first: the timers aimed at it are due soon
                    amount = 5000 if rng.random() < cfg.decline_rate else rng.randint(1, 900)
                    payload: dict[str, Any] = {"sku": f"S{submitted}", "quantity": 1, "amount": amount}
                    if (
                        driver is not None
                        and wait_submitter is not None
                        and _spread(submitted, cfg.wait_share)
                    ):
                        # Half the wait jobs submitted before every cluster stops wait for a time
                        # while they are down: submitted early enough, their timers wait by then.
                        aim = now < blackout_at and len(wait_job_ids) % 2 == 0
                        payload["not_before"], due_at = _not_before(
                            rng, now, (blackout_at, blackout_end) if aim else None
                        )
                        if aim:
                            aimed.append(due_at)
                        try:
                            job_id = wait_submitter.submit(
                                WORKFLOW_WAITS, payload, key=f"{run_id}-{submitted}"
                            )
                        except RuntimeError:
                            fault.submit_errors += 1
                        else:
                            job_ids.append(job_id)
                            wait_job_ids.append(job_id)
                            driver.add(job_id, planner.deal())
                        submitted += 1
                        if time.monotonic() - now > SUBMIT_SLICE:
                            break
                        continue
                    rest += 1
                    if _spread(rest - 1, language_of_rest):
                        workflow, payload = language.deal(f"O{submitted}", payload)
                        mine = language_job_ids
                    else:
                        workflow = workflows[plain % len(workflows)]
                        if workflow == WORKFLOW_KEYED:
                            payload["account"] = f"acct-{(plain // len(workflows)) % cfg.keys}"
                        plain += 1
                        probing = poisoner is not None and now < probe_until and not stuck.active
                        if workflow == WORKFLOW and probing and now >= next_probe:
                            payload["drops"] = 1  # synchronous calls only: the asynchronous answer later
                            fault.lag_probes += 1
                            next_probe = now + LAG_PROBE_EVERY
                        mine = None
                    tag = f"{run_id}-{submitted}"
                    mode, callback_url = receiver.deal(tag) if receiver and mine is None else ("", "")
                    try:
                        if submitter is not None:
                            job_ids.append(
                                submitter.submit(workflow, payload, key=tag, callback_url=callback_url)
                            )
                        else:
                            job_ids.append(
                                job_submit(workflow=workflow, input=payload, callback_url=callback_url).job_id
                            )
                        if mine is not None:
                            mine.append(job_ids[-1])
                        if mode:
                            callbacks[str(job_ids[-1])] = (mode, tag)
                        submitted += 1
                    except SasError:
                        raise
                    except Exception:  # noqa: BLE001 - an injected commit error: the job may exist
                        fault.submit_errors += 1
                        submitted += 1
                        connection.close()
                    if time.monotonic() - now > SUBMIT_SLICE:
                        break  # slow submissions must not push the faults out of the window
                if blackout is None and time.monotonic() >= blackout_at and now - started < cfg.duration:
                    for cluster in clusters:
                        cluster.kill()
                    restart_queue.clear()
                    blackout = Blackout(down_at=timezone.now())
                    blackout_end = _blackout_end(time.monotonic(), cfg.blackout_seconds, aimed)
                    blackouts.append(blackout)
                    fault.cluster_blackouts += 1
                    log(
                        f"every cluster down for {blackout_end - time.monotonic():.1f}s"
                        f" ({time.monotonic() - blackout_at:.1f}s after its time)"
                    )
                if blackout is not None and blackout.up_at is None:
                    if now < blackout_end:
                        time.sleep(0.05)
                        continue
                    blackout.up_at = timezone.now()
                    for cluster in clusters:
                        cluster.start()
                    outages.append((blackout.down_at, blackout.up_at + recovery))
                    # The kills due meanwhile come soon after, not at once.
                    next_kill = max(next_kill, now + 1.0)
                for when, cluster in list(restart_queue):
                    if now >= when:
                        cluster.start()
                        restart_queue.remove((when, cluster))
                if now >= next_kill and now - started < cfg.duration and not stuck.active:
                    victim = rng.choice([c for c in clusters if c.proc and c.proc.poll() is None] or clusters)
                    acting = victim.proc is not None and campaign_poison.holds_lease(victim.proc.pid)
                    victim.kill()
                    if acting:
                        # Its peer takes over once the lease expires: the acting supervisor's
                        # steps wait for that, by design.
                        outages.append((timezone.now(), timezone.now() + takeover_after))
                    fault.kills += 1
                    restart_queue.append((now + rng.uniform(0.5, 2.0), victim))
                    next_kill = now + cfg.kill_every
                if now >= next_drop and now - started < cfg.duration:
                    _drop_connection(fault, rng)
                    next_drop = now + cfg.db_drop_every
                if now >= next_operator and now - started < cfg.duration:
                    _double_retry(fault, rng, job_ids)
                    next_operator = now + cfg.operator_every
                if redis is not None and now >= next_broker and now - started < cfg.duration:
                    # Everything the broker held (requests and replies) is lost.
                    redis.restart(down_seconds=rng.uniform(0.2, 1.0))
                    fault.broker_restarts += 1
                    next_broker = time.monotonic() + cfg.broker_restart_every
                if poison is not None and now >= next_poison and now - started < cfg.duration:
                    poison.publish_next()
                    next_poison = time.monotonic() + cfg.poison_every
                # No restart of the database while the lag probes are measured (above), nor while
                # the stuck supervisor's window is open, or about to be: it times the takeover,
                # which needs a peer to start and a restart would hold back (a cluster starting
                # then retries, qcluster's start). A restart due then comes as the span ends,
                # while the faults go on a few seconds more.
                quiet = probes_quiet[0] <= now < probes_quiet[1] or (
                    stuck.active or (stuck.state == "off" and now >= stuck_at - 5.0)
                )
                if cfg.pg_restart and next_pg <= now and quiet:
                    next_pg = now + 1.0
                faults_on = now - started < cfg.duration or now < after_stuck
                if cfg.pg_restart and now >= next_pg and faults_on:
                    down_at = timezone.now()
                    restarts.append((time.monotonic(), float("inf")))
                    try:
                        _restart_postgres(fault)
                    finally:
                        restarts[-1] = (restarts[-1][0], time.monotonic() + RESTART_GRACE)
                    # The holder goes on at its next pass once the server is back (if it kept
                    # its lease: if not, the lag shows it).
                    outages.append((down_at, timezone.now() + dt.timedelta(seconds=cfg.supervisor_interval)))
                    next_pg = time.monotonic() + rng.uniform(cfg.pg_restart_min, cfg.pg_restart_max)
            except OperationalError as exc:
                fault.notes.append(f"campaign loop: {exc}".splitlines()[0][:200])
                connection.close()
                time.sleep(0.5)
            time.sleep(0.05)
        if blackout is not None and blackout.up_at is None:
            blackout.up_at = timezone.now()  # the clusters start again below
        if poisoner is not None:
            # What is still due of the poison is sent before the faults stop.
            poison_log = poisoner.stop(timeout=max(30.0, cfg.drain / 2))
        if flood is not None:
            bomb_log = flood.stop()
            flood = None
        if flow is not None:
            # The cancels still due are sent while the faults go on.
            flow_log = flow.finish(timeout=campaign_flow.WATCH_SECONDS + 10)
            flow = None
        if loops is not None:
            # Every round played, and the decisions due of the ladders that still wait.
            loops_log = loops.finish(timeout=30.0)
            loops = None
        if events is not None:
            # Every round played before the drain, so that it waits for their jobs too; the
            # driver goes on (the payments and signals still due).
            events.wait_for_rounds(timeout=60.0)
        log("faults off; draining")
        # Faults off: the remote behaves, the clusters restart without injected commit errors.
        with contextlib.suppress(httpx.HTTPError):
            sandbox.config(
                error_rate=0,
                drop_rate=0,
                latency_rate=0,
                latency_ms=0,
                hostile_rate=0.0,
                **_reply_faults(cfg, on=False),
            )
        restart_at = timezone.now()
        for cluster in clusters:
            cluster.stop()
            cluster.env = cluster_env(int(cluster.name), False)
            cluster.start()
        outages.append((restart_at, timezone.now() + recovery))
        drain_started = time.monotonic()

        poison_ids = [*poison_log.jobs, *poison_log.callback_jobs] if poison_log is not None else []
        bomb_ids = list(bomb_log.jobs) if bomb_log is not None else []
        flow_ids = flow_log.all_jobs() if flow_log is not None else []
        events_ids = events.log.all_jobs() if events is not None else []
        loops_ids = loops_log.all_jobs() if loops_log is not None else []

        def settled() -> bool:
            family = [*job_ids, *poison_ids, *bomb_ids, *flow_ids, *events_ids, *loops_ids]
            return Job.objects.filter(pk__in=family).exclude(status__in=SETTLED).count() == 0

        while time.monotonic() - drain_started < cfg.drain and not _db_retry(settled):
            time.sleep(0.5)
        drain_seconds = time.monotonic() - drain_started
        if driver is not None:
            # The signals due once the jobs ended (late ones, replays), then the driver stops.
            driver.finish(timeout=max(10.0, cfg.drain - drain_seconds))
        if flow_ids:
            # A cancel's try lost with a killed worker is sent again once its task's room has passed.
            campaign_flow.wait_for_cancels(flow_ids, slack=cfg.supervisor_interval * 3 + 10.0, most=180.0)
        if events is not None:
            # The late signals of the jobs that ended, then the kept ones' expiry.
            events_log = events.finish(timeout=max(10.0, cfg.drain - drain_seconds))
            events = None
            campaign_events.wait_for_expiry(
                run_id,
                slack=cfg.supervisor_interval * 3 + 5.0,
                most=campaign_events.LOOKBACK_SECONDS + 30.0,
            )
        if loops_ids:
            campaign_loops_checks.wait_for_alerts(loops_ids, most=cfg.supervisor_interval * 5 + 10.0)
        # Let in-flight compensations of settled jobs and late answers land.
        time.sleep(min(3.0, cfg.supervisor_interval * 3))
        stats = sandbox.stats()
        report_language = check_language(language_job_ids, stats)
        report = check(
            job_ids, stats, first_event, handovers_before, children=report_language["child_job_ids"]
        )
        report["language"] = report_language
        report["violations"] |= report_language["violations"]
        report["lease"] = check_lease(first_event, first_term)
        if report["lease"]["violations"]:
            report["violations"]["lease"] = report["lease"]["violations"]
        report["waits"] = check_waits(
            job_ids,
            wait_job_ids,
            driver,
            blackouts,
            grace_seconds=max(5.0, cfg.supervisor_interval * 5),
        )
        report["violations"] |= report["waits"]["violations"]
        if receiver is not None and sampler is not None:
            good = [job for job, (mode, _) in callbacks.items() if mode == "ok"]
            # As long as a claim lasts: a cluster killed mid-send leaves its message claimed.
            campaign_hostile.wait_for_callbacks(good, timeout=claim_seconds() + 15)
            report["hostile"] = campaign_hostile.check_hostile(
                job_ids,
                callbacks,
                stats,
                receiver,
                sampler.stop(),
                poison,
                {
                    reason: n - dead_before.get(reason, 0)
                    for reason, n in campaign_hostile.dead_lettered().items()
                },
            )
            report["violations"] |= report["hostile"]["violations"]
        if bomb_log is not None:
            report["bombs"] = campaign_bombs.check_bombs(
                bomb_log,
                stats,
                restarts=restarts,
                ordinary=submitter.latencies if submitter is not None else [],
            )
            report["violations"] |= report["bombs"]["violations"]
            # The bomb jobs are held to every invariant too, apart.
            bomb_check = check(bomb_ids, stats, first_event, 0)
            report["bombs"]["invariants"] = bomb_check["figures"]
            report["bombs"]["invariant_examples"] = bomb_check["examples"]
            report["violations"] |= {f"bomb_{k}": v for k, v in bomb_check["violations"].items()}
        if flow_log is not None:
            report["flow"] = campaign_flow.check_flow(flow_log, stats, since=started_at)
            report["violations"] |= report["flow"]["violations"]
            # The flow jobs are held to every invariant too, apart.
            flow_check = check(report["flow"]["job_ids"], stats, first_event, 0)
            report["flow"]["invariants"] = flow_check["figures"]
            report["flow"]["invariant_examples"] = flow_check["examples"]
            report["violations"] |= {f"flow_{k}": v for k, v in flow_check["violations"].items()}
        if loops_log is not None:
            report["loops"] = campaign_loops_checks.check_loops(loops_log, stats)
            report["violations"] |= report["loops"]["violations"]
            # The loops', ladders' and children's jobs are held to every invariant too, apart.
            loops_check = check(report["loops"]["job_ids"], stats, first_event, 0)
            report["loops"]["invariants"] = loops_check["figures"]
            report["loops"]["invariant_examples"] = loops_check["examples"]
            report["violations"] |= {f"loops_{k}": v for k, v in loops_check["violations"].items()}
        if events_log is not None:
            report["events"] = campaign_events_checks.check_events(
                events_log, run_id=run_id, since=started_at
            )
            report["violations"] |= report["events"]["violations"]
            # The events' jobs are held to every invariant too, apart.
            events_check = check(report["events"]["job_ids"], stats, first_event, 0)
            report["events"]["invariants"] = events_check["figures"]
            report["events"]["invariant_examples"] = events_check["examples"]
            report["violations"] |= {f"events_{k}": v for k, v in events_check["violations"].items()}
        window = stuck.window
        healthy = [*job_ids, *report_language["child_job_ids"]]
        report["lag"] = campaign_poison.remediation_lag(
            healthy,
            since=started_at,
            poison_from=poison_from,
            stuck=(window.started_at, window.ended_at) if window and window.ended_at else None,
            outages=outages,
            goal=dt.timedelta(seconds=2 * cfg.supervisor_interval),
        )
        if poison_log is not None:
            report["poison"] = campaign_poison.check_poison(
                poison_log,
                since=started_at,
                healthy=healthy,
                window=window,
                sandbox_poison=stats.get("poison", {}),
            )
            report["violations"] |= report["poison"]["violations"]
            # The poison jobs (and their children) are held to every invariant too, apart.
            poison_children = [
                str(pk)
                for pk in Job.objects.filter(parent_job__in=[uuid.UUID(i) for i in poison_ids]).values_list(
                    "pk", flat=True
                )
            ]
            poison_check = check(poison_ids, stats, first_event, 0, children=poison_children)
            report["poison"]["invariants"] = poison_check["figures"]
            report["poison"]["invariant_examples"] = poison_check["examples"]
            report["violations"] |= {f"poison_{k}": v for k, v in poison_check["violations"].items()}
    finally:
        if flood is not None:
            flood.stop()
        if flow is not None:
            flow.close()
        if events is not None:
            events.close()
        if loops is not None:
            loops.close()
        if flow_submitter is not None:
            flow_submitter.close()
        if holes is not None:
            holes.close()
        if sampler is not None:
            sampler.stop()
        if receiver is not None:
            receiver.stop()
        if driver is not None:
            driver.close()
        if wait_submitter is not None and wait_submitter is not submitter:
            wait_submitter.close()
        for cluster in clusters:
            cluster.stop()
        sandbox.stop()
        if submitter is not None:
            submitter.close()
        for w in webs:
            w.stop()
        if redis is not None:
            redis.stop()
        if bouncer is not None:
            bouncer.stop()
    report["faults"] = asdict(fault)
    report["config"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}
    report["seconds"] = {"total": round(time.monotonic() - started, 1), "drain": round(drain_seconds, 1)}
    report["ok"] = not report["violations"]
    return report


# --- the checker ------------------------------------------------------------------------------------


def check(
    job_ids: list[Any],
    stats: dict[str, Any],
    first_event: int,
    handovers_before: int,
    *,
    children: Sequence[Any] = (),
) -> dict[str, Any]:
    """Compute the campaign's figures from the database and the remote's ledger. The jobs'
    `children` (sub-workflows) are held to the same invariants, and counted apart."""
    effects: dict[str, int] = stats["effects"]
    family = [*job_ids, *children]
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=family).select_related("workflow")}
    found = Job.objects.filter(pk__in=job_ids).count()
    steps = list(Step.objects.filter(job_id__in=family).select_related("compensates"))
    by_job: dict[Any, list[Step]] = {}
    for step in steps:
        by_job.setdefault(step.job_id, []).append(step)
    statuses = Counter(j.status for j in jobs.values() if j.parent_job_id is None)
    # A parent whose child is held for an operator waits for that operator too (its step waits
    # for the child): settled as far as the service goes, as the campaign counts it.
    waiting_on_held = held_child_parents(jobs.values())
    waiting_on_held |= behind_held_holders(jobs.values(), held=waiting_on_held)
    not_settled = [
        str(j.pk) for j in jobs.values() if j.status not in SETTLED and j.pk not in waiting_on_held
    ]

    duplicates = {op: n for op, n in effects.items() if n > 1}
    # A step that succeeded caused exactly one effect at the remote.
    succeeded_without_effect = [
        s.operation_id
        for s in steps
        if s.kind == StepKind.ACTION
        and s.status in (StepStatus.SUCCEEDED, StepStatus.COMPENSATED)
        and s.last_outcome == "succeeded"
        and effects.get(s.operation_id, 0) != 1
    ]

    # No compensation ran for a job that succeeded, but for the undo of a fan-out's item that
    # failed after a call that may have reached the remote (a met join undoes those first): an
    # item that succeeded is never undone in a job that succeeded.
    def undone_in_success(s: Step) -> bool:
        if s.item_index is not None:
            return (
                s.kind == StepKind.ITEM
                and s.status == StepStatus.SUCCEEDED
                and bool(effects.get(f"{s.operation_id}:compensate", 0))
            )
        return s.kind == StepKind.COMPENSATION or bool(effects.get(f"{s.operation_id}:compensate", 0))

    compensations_for_succeeded = [
        str(job_id)
        for job_id, job in jobs.items()
        if job.status == JobStatus.SUCCEEDED and any(undone_in_success(s) for s in by_job.get(job_id, []))
    ]
    # A compensated or cancelled job left no effect undone.
    effects_left = [
        s.operation_id
        for s in steps
        if s.kind == StepKind.ACTION
        and jobs[s.job_id].status in (JobStatus.COMPENSATED, JobStatus.CANCELLED)
        and effects.get(s.operation_id, 0)
        and not effects.get(f"{s.operation_id}:compensate", 0)
    ]

    events: list[dict[str, Any]] = [
        dict(e)
        for e in Event.objects.filter(job_id__in=family)
        .order_by("id")
        .values("id", "job_id", "step_id", "kind", "from_status", "to_status", "actor_id", "data")
    ]
    backwards: list[dict[str, Any]] = []
    chains: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    key: tuple[str, Any]
    for e in events:
        if not e["to_status"]:
            continue
        if e["step_id"] is not None:
            table, operator_only, key = STEP_TRANSITIONS, STEP_OPERATOR_ONLY, ("step", e["step_id"])
        else:
            table, operator_only, key = JOB_TRANSITIONS, JOB_OPERATOR_ONLY, ("job", e["job_id"])
        chains.setdefault(key, []).append(e)
        frm, to = e["from_status"], e["to_status"]
        if not frm:
            continue  # creation
        # A wait's own signal, approval, timer or timeout completes it without an operator.
        own = key[0] == "step" and e["kind"] in STEP_WAIT_COMPLETIONS.get((frm, to), ())
        if to not in table.get(frm, ()) or ((frm, to) in operator_only and e["actor_id"] is None and not own):
            backwards.append({"event": e["id"], "from": frm, "to": to})
    missing: list[str] = []
    current = {("step", s.pk): s.status for s in steps} | {("job", j.pk): j.status for j in jobs.values()}
    for key, status in current.items():
        chain = chains.get(key, [])
        expected: str | None = StepStatus.PENDING if key[0] == "step" else None
        for e in chain:
            if e["from_status"] and expected is not None and e["from_status"] != expected:
                missing.append(f"{key[0]} {key[1]}: {expected} then an event from {e['from_status']}")
                break
            expected = e["to_status"]
        else:
            if expected is not None and expected != status:
                missing.append(f"{key[0]} {key[1]}: last event says {expected}, row says {status}")
    over_limit = keys_over_limit(jobs, events)
    detect = [
        float(e["data"]["overdue_ms"])
        for e in events
        if e["kind"] == "step_timed_out" and e["data"].get("overdue_ms") is not None
    ]
    handovers = (
        SupervisorLease.objects.filter(pk="supervisor").values_list("handovers", flat=True).first() or 0
    )
    late = Attempt.objects.filter(step__job_id__in=family, late_outcome="succeeded").count()
    figures = {
        "jobs_submitted": len(job_ids),
        "jobs_missing": len(job_ids) - found,
        "child_jobs": len(children),
        "jobs_by_status": dict(sorted(statuses.items())),
        "jobs_not_settled": len(not_settled),
        # Running for a child held for an operator, or waiting for a key such jobs hold.
        "jobs_waiting_for_an_operator_elsewhere": len(waiting_on_held),
        "remote_effects": sum(effects.values()),
        "remote_deliveries": sum(stats["deliveries"].values()),
        "remote_replays": stats["replays"],
        "remote_voided": stats.get("voided", 0),
        "duplicate_effects": len(duplicates),
        "succeeded_steps_without_one_effect": len(succeeded_without_effect),
        "compensations_for_succeeded_jobs": len(compensations_for_succeeded),
        "effects_left_after_compensation": len(effects_left),
        "backward_moves": len(backwards),
        "missing_events": len(missing),
        "supervisor_handovers": handovers - handovers_before,
        "late_successes": late,
        "keyed_jobs": sum(1 for j in jobs.values() if j.concurrency_key),
        "keys_over_their_limit": len(over_limit),
        "overdue_detect_ms": {
            "count": len(detect),
            "p50": percentile(detect, 50),
            "p99": percentile(detect, 99),
        },
    }
    violations = {
        name: figures[name]
        for name in (
            "jobs_missing",
            "jobs_not_settled",
            "duplicate_effects",
            "succeeded_steps_without_one_effect",
            "compensations_for_succeeded_jobs",
            "effects_left_after_compensation",
            "backward_moves",
            "missing_events",
            "keys_over_their_limit",
        )
        if figures[name]
    }
    return {
        "figures": figures,
        "violations": violations,
        "examples": {
            # Each with what it waits for: its status, workflow, concurrency key and that key's
            # holders (a job waiting for a key is settled by whoever holds it).
            "not_settled": [unsettled_note(jobs, pk) for pk in not_settled[:5]],
            "duplicates": dict(list(duplicates.items())[:5]),
            "succeeded_without_effect": succeeded_without_effect[:5],
            "compensations_for_succeeded": compensations_for_succeeded[:5],
            "effects_left": effects_left[:5],
            "backwards": backwards[:5],
            "missing_events": missing[:5],
            "keys_over_their_limit": over_limit[:5],
        },
        "first_event_id": first_event,
        # What the remote itself injected (the asynchronous reports' faults among them).
        "remote_faults": stats.get("faults", {}),
    }


def unsettled_note(jobs: dict[Any, Job], pk: str) -> str:
    """A job left unsettled, in a line: status, workflow, and for a keyed job its key's holders."""
    job = next(j for j in jobs.values() if str(j.pk) == pk)
    note = f"{pk} {job.status} {job.workflow.name}"
    if job.concurrency_key:
        holders = [
            f"{j.pk} {j.status}"
            for j in jobs.values()
            if j.concurrency_key == job.concurrency_key
            and j.workflow_id == job.workflow_id
            and j.status in KEY_HOLDING
        ]
        note += f" key {job.concurrency_key} held by {holders or 'none'}"
    return note


def behind_held_holders(jobs: Iterable[Job], *, held: set[Any]) -> set[Any]:
    """The jobs, among `jobs`, waiting for a concurrency key whose holders fill its limit and
    all wait for an operator (needing attention, or waiting for a child that does): a key is
    held until its holder settles, so these wait for that operator too."""
    holders: dict[tuple[Any, str], list[Job]] = {}
    waiting: list[Job] = []
    for job in jobs:
        if not job.concurrency_key:
            continue
        if job.status == JobStatus.WAITING:
            waiting.append(job)
        elif job.status in KEY_HOLDING:
            holders.setdefault((job.workflow_id, job.concurrency_key), []).append(job)
    behind: set[Any] = set()
    for job in waiting:
        limit = (job.workflow.concurrency or {}).get("limit", 0)
        holding = holders.get((job.workflow_id, job.concurrency_key), [])
        if (
            holding
            and len(holding) >= limit
            and all(h.status == JobStatus.NEEDS_ATTENTION or h.pk in held for h in holding)
        ):
            behind.add(job.pk)
    return behind


def keys_over_limit(jobs: dict[Any, Job], events: list[dict[str, Any]]) -> list[str]:
    """The concurrency keys more jobs held at once than their limit, in the order of the jobs'
    events (a job holds its key from the event that made it running, or pending, until the one
    that took it out of KEY_HOLDING)."""
    limits = {
        j.workflow_id: (j.workflow.concurrency or {}).get("limit", 0)
        for j in jobs.values()
        if j.concurrency_key
    }
    holding: dict[tuple[int, str], set[Any]] = {}
    over: list[str] = []
    for e in events:
        job = jobs.get(e["job_id"])
        if job is None or not job.concurrency_key or e["step_id"] is not None or not e["to_status"]:
            continue
        key = (job.workflow_id, job.concurrency_key)
        holders = holding.setdefault(key, set())
        if e["to_status"] in KEY_HOLDING:
            holders.add(job.pk)
            if len(holders) > limits[job.workflow_id]:
                over.append(f"{job.concurrency_key}: {len(holders)} jobs at event {e['id']}")
        else:
            holders.discard(job.pk)
    return over


def check_lease(first_event: int, first_term: int) -> dict[str, Any]:
    """One supervisor acting at a time, from the durable record.

    The terms: each finished term's last possible action (`expired_at`) comes no later than the
    next holder's takeover (`ended_at`), and the terms follow each other (the next term's holder
    took over from this one). The actions: a supervisor decision is written after `lease_fence`
    locked the lease row in the same transaction, so event ids follow the order in which
    holders held the lease; read in id order, the holders who decided must appear in the order
    of their terms (a holder that reappears after a later holder acted, without a later term of
    its own, acted beside it)."""
    terms = list(
        LeaseTerm.objects.filter(lease=LEASE_NAME, id__gt=first_term)
        .order_by("id")
        .values("token", "holder", "acquired_at", "expired_at", "ended_at", "ended_by")
    )
    lease = SupervisorLease.objects.filter(pk=LEASE_NAME).first()
    current: dict[str, Any] = {"token": lease.token, "holder": lease.holder} if lease else {}
    violations: list[str] = []
    for term, following in zip(terms, [*terms[1:], None], strict=True):
        ended, expired = term["ended_at"], term["expired_at"]
        if ended is not None and expired is not None and expired > ended:
            violations.append(
                f"term {term['token']} of {term['holder']} could act until {expired}, "
                f"after {term['ended_by']} took over at {ended}"
            )
        nxt = following or current
        if nxt and (nxt.get("holder") != term["ended_by"] or nxt.get("token", 0) <= term["token"]):
            violations.append(f"term {term['token']} was not followed by the term of {term['ended_by']}")
    # Holders in the order they held the lease during the run.
    order = [t["holder"] for t in terms] + ([current["holder"]] if current.get("holder") else [])
    deciders = (
        Event.objects.filter(id__gt=first_event, source__startswith="supervisor:")
        .order_by("id")
        .values_list("id", "source")
    )
    position = 0
    runs: list[str] = []
    for event_id, source in deciders.iterator(chunk_size=5000):
        holder = source.removeprefix("supervisor:")
        if runs and runs[-1] == holder:
            continue
        runs.append(holder)
        try:
            position = order.index(holder, position)
        except ValueError:
            violations.append(f"event {event_id}: {holder} decided outside its term")
    return {
        "terms_finished": len(terms),
        "holders_deciding": len(set(runs)),
        "decision_runs": len(runs),
        "violations": violations[:10],
    }


def _apart_rows(what: str, invariants: dict[str, Any]) -> list[tuple[str, Any]]:
    """The rows of the invariants of "The figures" held by a group of jobs apart."""
    return [
        (f"{what} jobs: {name.replace('_', ' ')} (must be 0)", invariants[name])
        for name in (
            "jobs_missing",
            "jobs_not_settled",
            "duplicate_effects",
            "succeeded_steps_without_one_effect",
            "compensations_for_succeeded_jobs",
            "effects_left_after_compensation",
            "backward_moves",
            "missing_events",
        )
    ]


def table(report: dict[str, Any]) -> str:
    f = report["figures"]
    rows = [
        ("jobs submitted", f["jobs_submitted"]),
        ("jobs lost (must be 0)", f["jobs_missing"]),
        *((f"jobs {status}", n) for status, n in f["jobs_by_status"].items()),
        ("jobs not settled (must be 0)", f["jobs_not_settled"]),
        (
            "jobs waiting for an operator elsewhere (a held child, a key held by such jobs)",
            f.get("jobs_waiting_for_an_operator_elsewhere", 0),
        ),
        ("side effects at the remote", f["remote_effects"]),
        (
            "deliveries at the remote / replays / voided",
            f"{f['remote_deliveries']} / {f['remote_replays']} / {f['remote_voided']}",
        ),
        ("operation IDs with more than one effect (must be 0)", f["duplicate_effects"]),
        ("succeeded steps without exactly one effect (must be 0)", f["succeeded_steps_without_one_effect"]),
        ("compensations for jobs that succeeded (must be 0)", f["compensations_for_succeeded_jobs"]),
        ("effects left after compensation (must be 0)", f["effects_left_after_compensation"]),
        ("statuses that moved backwards (must be 0)", f["backward_moves"]),
        ("state changes without their event (must be 0)", f["missing_events"]),
        (
            f"keyed jobs / keys held by more than {KEY_LIMIT} at once (must be 0)",
            f"{f.get('keyed_jobs', 0)} / {f.get('keys_over_their_limit', 0)}",
        ),
        ("supervisor hand-overs", f["supervisor_handovers"]),
        ("late successes", f["late_successes"]),
        (
            "time to detect an overdue step p50 / p99 ms",
            "{p50} / {p99} (n={count})".format(**f["overdue_detect_ms"]),
        ),
    ]
    if "lag" in report:
        rows += campaign_poison.lag_rows(report["lag"])
    waits = report.get("waits")
    if waits is not None and waits["figures"]["wait_jobs"]:
        rows += table_rows(waits)
    language = report.get("language")
    if language is not None and language["figures"]["language_jobs"]:
        rows += campaign_language.table_rows(language)
    hostile = report.get("hostile")
    if hostile is not None:
        rows += campaign_hostile.table_rows(hostile)
    bombs = report.get("bombs")
    if bombs is not None:
        rows += campaign_bombs.table_rows(bombs)
    poison = report.get("poison")
    if poison is not None:
        rows += campaign_poison.table_rows(poison)
    flow = report.get("flow")
    if flow is not None:
        rows += campaign_flow.table_rows(flow)
        rows += _apart_rows("flow", flow["invariants"])
    loops = report.get("loops")
    if loops is not None:
        rows += campaign_loops_checks.table_rows(loops)
        rows += _apart_rows("loops", loops["invariants"])
    events = report.get("events")
    if events is not None:
        rows += campaign_events_checks.table_rows(events)
        rows += _apart_rows("events", events["invariants"])
    lease = report.get("lease")
    if lease is not None:
        rows += [
            ("lease terms finished (hand-overs)", lease["terms_finished"]),
            (
                "supervisors that decided / runs of decisions",
                f"{lease['holders_deciding']} / {lease['decision_runs']}",
            ),
            ("lease terms overlapping or decisions out of term (must be 0)", len(lease["violations"])),
        ]
    faults = report.get("faults", {})
    rows += [(f"fault: {k.replace('_', ' ')}", v) for k, v in faults.items() if k != "notes"]
    rows += [(f"remote fault: {k.replace('_', ' ')}", v) for k, v in report.get("remote_faults", {}).items()]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value}" for name, value in rows]
    lines.append("")
    lines.append(
        "RESULT: "
        + ("all invariants hold" if report["ok"] else f"VIOLATED {json.dumps(report['violations'])}")
    )
    return "\n".join(lines)
