"""Cluster heartbeats: live, lost and stopped clusters, the liveness check `cluster_check`, and
the console's Clusters card."""

from __future__ import annotations

import datetime as dt
import re
import socket

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from sas_project.permissions import role_groups_ensure
from scheduler.unit import db_now
from supervisor import heartbeats
from supervisor.models import ClusterHeartbeat

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

HOST = socket.gethostname()


def age(name: str, seconds: float) -> None:
    ClusterHeartbeat.objects.filter(pk=name).update(beat_at=timezone.now() - dt.timedelta(seconds=seconds))


def test_a_beating_cluster_is_live_and_one_that_missed_three_beats_is_lost() -> None:
    heartbeats.beat(f"{HOST}:101", workers=4)
    heartbeats.beat("other-host:7", workers=2)
    age("other-host:7", 31)  # three beats of 10 s missed
    states = {c.name: c for c in heartbeats.clusters(db_now())}
    assert states[f"{HOST}:101"].state == "live" and states[f"{HOST}:101"].workers == 4
    assert states[f"{HOST}:101"].host == HOST and states[f"{HOST}:101"].pid == 101
    assert states["other-host:7"].state == "lost"
    # A lost cluster that beats again is live again; its start is kept.
    started = ClusterHeartbeat.objects.get(pk="other-host:7").started_at
    heartbeats.beat("other-host:7", workers=2)
    row = ClusterHeartbeat.objects.get(pk="other-host:7")
    assert row.started_at == started and heartbeats.clusters(db_now())[0].state == "live"


def test_a_stopped_cluster_shows_a_day_then_its_row_goes_after_a_week() -> None:
    heartbeats.beat(f"{HOST}:5", workers=1)
    heartbeats.stopped(f"{HOST}:5")
    assert [c.state for c in heartbeats.clusters(db_now())] == ["stopped"]
    ClusterHeartbeat.objects.filter(pk=f"{HOST}:5").update(stopped_at=timezone.now() - dt.timedelta(days=2))
    assert heartbeats.clusters(db_now()) == []
    ClusterHeartbeat.objects.filter(pk=f"{HOST}:5").update(stopped_at=timezone.now() - dt.timedelta(days=8))
    heartbeats.beat(f"{HOST}:6", workers=1)  # a new cluster's first beat sweeps the old rows
    assert list(ClusterHeartbeat.objects.values_list("pk", flat=True)) == [f"{HOST}:6"]


def test_cluster_check_passes_for_a_live_cluster_of_this_host_and_says_why_it_fails() -> None:
    with pytest.raises(CommandError, match="no heartbeat of a cluster on this host"):
        call_command("cluster_check")
    heartbeats.beat(f"{HOST}:11", workers=3)
    call_command("cluster_check")
    call_command("cluster_check", name=f"{HOST}:11")
    age(f"{HOST}:11", 40)
    with pytest.raises(CommandError, match=rf"cluster {HOST}:11 lost: last beat 40s ago"):
        call_command("cluster_check")
    heartbeats.beat(f"{HOST}:11", workers=3)
    heartbeats.stopped(f"{HOST}:11")
    with pytest.raises(CommandError, match="no heartbeat"):
        call_command("cluster_check")
    # A live cluster of another host does not make this one's probe pass.
    heartbeats.beat("elsewhere:1", workers=3)
    with pytest.raises(CommandError):
        call_command("cluster_check")


def test_the_overview_lists_live_lost_and_stopped_clusters(client: Client) -> None:
    role_groups_ensure()
    viewer = User.objects.create_user("vera", password="vera-password-1")
    viewer.groups.add(Group.objects.get(name="viewers"))
    client.force_login(viewer)
    heartbeats.beat("a-host:1", workers=4)
    heartbeats.beat("b-host:2", workers=4)
    age("b-host:2", 60)
    heartbeats.beat("c-host:3", workers=2)
    heartbeats.stopped("c-host:3")
    html = client.get("/ops/", HTTP_HX_REQUEST="true").content.decode()
    card = html[html.index('id="clusters"') :]
    assert 'data-cluster="a-host:1" data-state="live"' in card
    assert 'data-cluster="b-host:2" data-state="lost"' in card
    assert 'data-cluster="c-host:3" data-state="stopped"' in card
    assert "1 live" in card


def test_each_beat_records_the_busy_workers_and_a_live_cluster_s_others_are_idle() -> None:
    heartbeats.beat("a-host:1", workers=4, busy=3)
    heartbeats.beat("b-host:2", workers=4, busy=4)
    age("b-host:2", 60)
    heartbeats.beat("c-host:3", workers=2)
    states = {c.name: c for c in heartbeats.clusters(db_now())}
    assert (states["a-host:1"].busy, states["a-host:1"].idle) == (3, 1)
    # A lost cluster's last figure is not what runs now; a cluster that measures nothing says so.
    assert (states["b-host:2"].busy, states["b-host:2"].idle) == (None, None)
    assert (states["c-host:3"].busy, states["c-host:3"].idle) == (None, None)
    heartbeats.beat("a-host:1", workers=4, busy=0)
    assert heartbeats.clusters(db_now())[0].idle == 4


def test_the_clusters_card_shows_busy_and_idle_workers_and_the_queue_s_depth(client: Client) -> None:
    from django_q.models import OrmQ

    role_groups_ensure()
    viewer = User.objects.create_user("vera", password="vera-password-1")
    viewer.groups.add(Group.objects.get(name="viewers"))
    client.force_login(viewer)
    heartbeats.beat("a-host:1", workers=4, busy=3)
    heartbeats.beat("b-host:2", workers=2, busy=0)
    heartbeats.beat("c-host:3", workers=2, busy=2)
    age("c-host:3", 60)
    for n in range(5):
        OrmQ.objects.create(key="sas", payload=f"p{n}", lock=timezone.now())
    html = client.get("/ops/", HTTP_HX_REQUEST="true").content.decode()
    card = html[html.index('id="clusters"') : html.index('id="endpoint-health"')]
    a = re.search(r'<tr data-cluster="a-host:1".*?</tr>', card, re.S)
    c = re.search(r'<tr data-cluster="c-host:3".*?</tr>', card, re.S)
    assert a and c
    assert 'data-busy="3"' in a.group(0) and 'data-idle="1"' in a.group(0)
    assert 'data-busy=""' in c.group(0) and "—" in c.group(0)  # lost: not measured now
    assert "workers busy: <strong>3</strong> of 6 in live clusters" in card
    assert "tasks queued for a worker: <strong>5</strong>" in card
