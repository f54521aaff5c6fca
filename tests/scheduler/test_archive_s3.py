"""The history archive in S3-compatible object storage (SAS_ARCHIVE_STORAGE=s3), against a real
S3 API server (moto's server mode, a subprocess on a free port): retention writes one object per
batch and settle day, restore reads every object of a day, writers on two hosts never write the
same object (the bucket is versioned: an object written twice would have two versions), and a
store that refuses or cannot be reached backs off like a full disk."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import boto3
import httpx
import pytest
from django.core.management import call_command

from sas_project.storage import s3_archive_storage
from scheduler import archive
from scheduler.models import ArchivedJob, Event, EventKind, Job
from scheduler.services import retention
from scheduler.services.retention import ArchiveHealth, ArchiveUnwritable, history_prune
from tests.processes import ARTIFACTS, ROOT, Cluster, child_env, free_port, stop_group, wait_until
from tests.scheduler.test_history import DAYS, day_of, rows_of, settled_jobs

pytestmark = [pytest.mark.django_db, pytest.mark.e2e]

REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
PREFIX = "sas/archive"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A real S3 API on loopback: moto's server, in its own process group."""
    port = free_port()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / f"moto-{port}.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    endpoint = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return httpx.get(f"{endpoint}/moto-api/", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, timeout=60, message="moto's S3 server")
        yield endpoint
    finally:
        stop_group(proc)


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    )


@pytest.fixture
def bucket(s3_endpoint: str, settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    """A new versioned bucket, the archive store of this process (the processes it starts get
    the same through `s3_env`)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    name = f"archive-{uuid.uuid4().hex[:12]}"
    client(s3_endpoint).create_bucket(Bucket=name)
    client(s3_endpoint).put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    settings.SAS_ARCHIVE_DIR = tmp_path / "not-used"
    settings.SAS_HISTORY_DAYS = DAYS
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": s3_archive_storage(bucket=name, prefix=PREFIX, endpoint_url=s3_endpoint, region=REGION),
    }
    monkeypatch.setattr(retention, "ARCHIVE_HEALTH", ArchiveHealth())
    return name


def versions(endpoint: str, bucket: str) -> dict[str, int]:
    """How many versions each key of the bucket has."""
    counts: dict[str, int] = {}
    for page in client(endpoint).get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    return counts


def s3_env(endpoint: str, bucket: str) -> dict[str, str]:
    """The environment that makes a process of the service archive to `bucket`."""
    return {
        "SAS_ARCHIVE_STORAGE": "s3",
        "SAS_ARCHIVE_S3_BUCKET": bucket,
        "SAS_ARCHIVE_S3_PREFIX": PREFIX,
        "SAS_ARCHIVE_S3_ENDPOINT_URL": endpoint,
        "SAS_ARCHIVE_S3_REGION": REGION,
        **CREDENTIALS,
    }


@pytest.mark.sqlite
def test_retention_writes_objects_to_the_bucket_and_a_day_loads_back_from_them(
    drain: Callable[[], int], s3_endpoint: str, bucket: str
) -> None:
    jobs = settled_jobs(drain, 5, age_days=DAYS + 1)
    before = rows_of([j.pk for j in jobs])
    report = history_prune(source="test", batch_size=2)
    assert report.jobs == 5 and not Job.objects.exists()

    # One object per batch, in the day's folder under the prefix, each written once.
    folder = archive.day_folder(day_of(jobs[0]))
    keys = versions(s3_endpoint, bucket)
    assert len(keys) == 3 and set(keys.values()) == {1}
    assert all(key.startswith(f"{PREFIX}/{folder}/") and key.endswith(".jsonl.gz") for key in keys)
    assert {f"{PREFIX}/{name}" for name in report.files} == set(keys)
    assert set(ArchivedJob.objects.values_list("archive", flat=True)) == report.files

    out = StringIO()
    call_command("history_restore", "--day", f"{day_of(jobs[0]):%Y-%m-%d}", stdout=out)
    assert "5 jobs loaded back from 3 archive objects" in out.getvalue()
    assert rows_of([j.pk for j in jobs]) == before


@pytest.mark.sqlite
def test_an_object_named_by_the_api_loads_back_alone(drain: Callable[[], int], bucket: str) -> None:
    from tests.api.support import V1, client_for, make_user

    alice = make_user("alice", "submitters")
    (job, other) = settled_jobs(drain, 2, age_days=DAYS + 1, submitter=alice)
    history_prune(source="test", batch_size=1)
    name = client_for(alice).get(f"{V1}/jobs/{job.pk}/").json()["archive"]
    call_command("history_restore", name, stdout=StringIO())
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
    assert ArchivedJob.objects.filter(job_id=other.pk).exists()


@pytest.mark.sqlite
def test_a_bucket_that_refuses_backs_off_and_rolls_the_batch_back(
    drain: Callable[[], int], s3_endpoint: str, bucket: str, settings: Any
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": s3_archive_storage(
            bucket="no-such-bucket", prefix=PREFIX, endpoint_url=s3_endpoint, region=REGION
        ),
    }
    with pytest.raises(ArchiveUnwritable) as failure:
        history_prune(source="test")
    assert failure.value.location == f"s3://no-such-bucket/{PREFIX}"
    assert "NoSuchBucket" in str(failure.value.error)
    assert Job.objects.get(pk=job.pk).archived_at is None and not ArchivedJob.objects.exists()
    assert retention.ARCHIVE_HEALTH.failures == 1


@pytest.mark.sqlite
def test_an_unreachable_store_fails_within_its_bounds(
    drain: Callable[[], int], bucket: str, settings: Any
) -> None:
    (job,) = settled_jobs(drain, 1, age_days=DAYS + 1)
    closed = f"http://127.0.0.1:{free_port()}"
    settings.STORAGES = {
        **settings.STORAGES,
        "archive": s3_archive_storage(
            bucket=bucket, prefix=PREFIX, endpoint_url=closed, region=REGION, timeout=1
        ),
    }
    started = time.monotonic()
    with pytest.raises(ArchiveUnwritable) as failure:
        history_prune(source="test")
    assert time.monotonic() - started < 10
    assert "Could not connect" in str(failure.value.error)
    assert Job.objects.get(pk=job.pk).archived_at is None


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # other processes read the jobs
def test_two_clusters_sharing_the_bucket_never_write_the_same_object(
    drain: Callable[[], int], s3_endpoint: str, bucket: str
) -> None:
    """Two writers at once (two hosts running retention over the same day), then, after late
    events reopened some jobs, a real cluster's supervisor archiving them again as the lease
    holder: every object has one version, every job loads back once, as its latest record."""
    jobs = settled_jobs(drain, 24, age_days=DAYS + 1)
    day = day_of(jobs[0])
    writers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "history_prune", "--archive-only", "--batch-size", "2"],
            cwd=ROOT,
            env=child_env(**s3_env(s3_endpoint, bucket)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [w.communicate(timeout=120)[0] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], outputs
    reports = [json.loads(out[out.index("{") :]) for out in outputs]
    assert sum(r["archived"] for r in reports) == 24  # each job by one writer (SKIP LOCKED)
    first_round = set(versions(s3_endpoint, bucket))
    assert len(first_round) == sum(len(r["files"]) for r in reports)

    # Late events reopen four jobs; the cluster holding the lease archives them again.
    reopened = jobs[:4]
    late = [
        Event.objects.create(job=j, kind=EventKind.LATE_SUCCESS, source="agent", reason="late reply")
        for j in reopened
    ]
    assert Job.objects.filter(pk__in=[j.pk for j in reopened], archived_at__isnull=True).count() == 4
    cluster = Cluster("archiver", env=s3_env(s3_endpoint, bucket)).start()
    try:
        wait_until(
            lambda: not Job.objects.filter(archived_at__isnull=True).exists(),
            timeout=60,
            message="the cluster archiving the reopened jobs",
        )
    finally:
        cluster.stop()

    keys = versions(s3_endpoint, bucket)
    assert set(keys.values()) == {1}, keys  # no object written twice
    assert first_round < set(keys)  # the cluster wrote new objects beside the earlier ones
    names = archive.day_objects(archive.archive_storage(), day)
    assert {f"{PREFIX}/{n}" for n in names} == set(keys)
    writers_seen = {n.split("/")[-1].split("-", 1)[1].rsplit("-", 1)[0] for n in names}
    # Each command process that archived anything, and the cluster. A process that started
    # after the other had taken every job archived nothing, and wrote nothing.
    assert len(writers_seen) == sum(1 for r in reports if r["archived"]) + 1, (writers_seen, reports)

    assert history_prune(source="test").jobs == 24 and not Job.objects.exists()
    out = StringIO()
    call_command("history_restore", "--day", f"{day:%Y-%m-%d}", stdout=out)
    assert f"24 jobs loaded back from {len(names)} archive objects" in out.getvalue()
    # The reopened jobs came back as their latest record, with their late event.
    restored = set(Event.objects.filter(pk__in=[e.pk for e in late]).values_list("pk", flat=True))
    assert restored == {e.pk for e in late}
