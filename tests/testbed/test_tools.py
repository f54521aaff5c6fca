"""The testbed's destructive tools stay off databases that hold other people's jobs."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from scheduler.services import job_submit
from testbed.definitions import ForeignJobs, refuse_foreign_jobs
from tests.factories import chain

pytestmark = pytest.mark.django_db


def test_a_database_with_foreign_jobs_is_refused_with_the_way_out_named() -> None:
    chain("orders", n=1)
    job_submit(workflow="orders", input={})
    with pytest.raises(ForeignJobs, match="--scratch") as caught:
        refuse_foreign_jobs("bench", ["bench_single"], scratch=False)
    assert "1 job(s)" in str(caught.value) and "'orders'" in str(caught.value)


def test_only_its_own_jobs_or_scratch_let_a_tool_run() -> None:
    chain("bench_single", n=1)
    job_submit(workflow="bench_single", input={})
    refuse_foreign_jobs("bench", ["bench_single"], scratch=False)
    chain("orders", n=1)
    job_submit(workflow="orders", input={})
    refuse_foreign_jobs("bench", ["bench_single"], scratch=True)


@pytest.mark.parametrize("command", ["bench", "fault_campaign"])
def test_the_commands_refuse_before_changing_anything(command: str) -> None:
    from django_q.models import OrmQ

    chain("orders", n=1)
    job_submit(workflow="orders", input={})
    queued = OrmQ.objects.count()
    with pytest.raises(CommandError, match="--scratch"):
        call_command(command)
    assert OrmQ.objects.count() == queued == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--peers", "temporal,celery"], "--peers takes temporal, procrastinate, dbos"),
        (["--peers", "--peers-work", "http,sleep"], "--peers-work takes http, noop"),
        (["--peers-only"], "give --peers too"),
        (["--peers", "--fan-out", "10"], "not --scale, --fan-out"),
    ],
)
def test_bench_refuses_unknown_peers_and_work_before_changing_anything(args: list[str], message: str) -> None:
    from django_q.models import OrmQ

    chain("orders", n=1)
    job_submit(workflow="orders", input={})
    with pytest.raises(CommandError, match=message):
        call_command("bench", *args)
    assert OrmQ.objects.count() == 1
