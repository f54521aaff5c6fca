"""The outbox: messages for receivers outside the service, written in the transaction of what they
tell (scheduler.models.Delivery), sent later by the supervisor loop (supervisor.deliveries).

- A job's completion callback is written when the job settles (scheduler.transitions, and the
  PostgreSQL function that completes jobs), keyed `<job id>:<status>`.
- A child job's settling is told to its parent's sub-workflow step by a task enqueued in the
  transaction that settles it (`parent_notify`; scheduler.services.children settles the step).
- Alerts are written by the supervisor from the events it reacts to. Those events reach it
  through the database, not through Python: a trigger on the event table (generated from
  REACTION_KINDS by scheduler.sqlgen) queues each event of these kinds (scheduler.models.
  EventReaction) in the transaction that writes it, whoever writes it, and the supervisor loop
  takes them from there (supervisor.alerts.reactions_handle).

Every message names its receiver (`receiver_of`: the URL's `host:port`), which the sender takes
turns between and keeps a circuit breaker for (supervisor.deliveries).

Restated in SQL (keep both in step; the equivalence tests compare them):
`scheduler/sql/postgresql/sas_record_outcome.sql`, `scheduler/sql/postgresql/sas_url_receiver.sql`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.tasks import async_task

from agents.broker import ClaimByDeleteORM
from scheduler.models import Delivery, DeliveryKind, EventKind, Job, Step, StepKind

#: The tasks of a sub-workflow step (scheduler.tasks), each given the parent step's id: start its
#: child job, and settle the step once its child has settled.
CHILD_START_TASK = "scheduler.tasks.start_child"
CHILD_SETTLED_TASK = "scheduler.tasks.settle_child"

#: The event kinds something reacts to (the supervisor's alert kinds read these): each is queued
#: for its reader by the database (scheduler/sql/*/..._reactions.sql, generated from this set).
REACTION_KINDS: frozenset[str] = frozenset(
    {
        *(EventKind.STEP_HELD, EventKind.JOB_FAILED, EventKind.JOB_COMPENSATED, EventKind.APPROVAL_REQUESTED),
        *(EventKind.WAIT_REMINDED, EventKind.WAIT_ESCALATED),
    }
)


#: The port of a URL that names none.
DEFAULT_PORTS = {"http": 80, "https": 443}


def receiver_of(url: str) -> str:
    """Who receives messages sent to `url`: its host (lower case, without a final dot) and port,
    the scheme's default port counting as written (`hooks.example.com:443`, `[::1]:8080`); empty
    for what is not such a URL (an email address). Restated in SQL by `sas_url_receiver`."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return ""
    host = (parts.hostname or "").rstrip(".")
    if not host or port is None:
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def callback_summary(job: Job, status: str) -> dict[str, Any]:
    """What a completion callback carries."""
    return {
        "id": str(job.pk),
        "workflow": job.workflow.name,
        "status": status,
        "result": job.result,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


def callback_write(job: Job, status: str) -> None:
    """The job's completion callback for `status`, once (a second one with the same key is
    dropped: the receiver would see the same message twice)."""
    Delivery.objects.bulk_create(
        [
            Delivery(
                kind=DeliveryKind.CALLBACK,
                key=f"{job.pk}:{status}",
                target=job.callback_url,
                receiver=receiver_of(job.callback_url),
                payload=callback_summary(job, status),
                job=job,
                next_try_at=job.finished_at or job.updated_at,
                created_at=job.updated_at,
            )
        ],
        ignore_conflicts=True,
    )


def task_write(func: str, *ids: int, name: str) -> None:
    """Enqueue task `func` with integer ids in the caller's transaction. With the project's broker
    (the ORM, same database) the task exists if and only if the transaction commits: the intent
    and its task are one write, as a dispatch's are (scheduler.services.dispatch)."""
    broker = get_broker()
    timeout = int(Conf.TIMEOUT or 60)
    if isinstance(broker, ClaimByDeleteORM):
        broker.enqueue_compact(func, ids, timeout=timeout)
        return
    async_task(func, *ids, task_name=name, broker=broker, q_options={"timeout": timeout})


def parent_notify(job: Job) -> None:
    """A child job settled: enqueue the settling of the sub-workflow step that waits for it. The
    task takes the parent's lock in a transaction of its own, never while the child's is held
    (a parent's cancel takes the parent's lock, then the child's)."""
    if job.parent_job_id is None:
        return
    step_id = (
        Step.objects.filter(job_id=job.parent_job_id, name=job.parent_step, kind=StepKind.ACTION)
        .values_list("pk", flat=True)
        .first()
    )
    if step_id is not None:
        task_write(CHILD_SETTLED_TASK, step_id, name=f"step-{step_id}-child-settled")
