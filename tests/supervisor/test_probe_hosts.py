"""The probes and the metrics answer whatever Host a pod's probe or scrape sends (its IP), while
every other path keeps the host check of DJANGO_ALLOWED_HOSTS."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]

POD_IP = "10.42.0.17:8000"


def test_the_probes_answer_a_pod_address_that_allowed_hosts_does_not_list(settings: Any) -> None:
    settings.SAS_METRICS_TOKEN = "scrape"
    client = Client(HTTP_HOST=POD_IP, headers={"Authorization": "Bearer scrape"})
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").json()["checks"]["database"] == "ok"
    # Stale (no supervisor scanned here), but answered: not the host check's 400.
    assert client.get("/supervisorz").status_code == 503
    assert client.get("/metrics").status_code == 200


def test_every_other_path_and_method_still_checks_the_host() -> None:
    client = Client(HTTP_HOST=POD_IP)
    assert client.get("/api/v1/jobs/").status_code == 400
    assert client.get("/ops/").status_code == 400
    assert client.post("/healthz").status_code == 400
    assert Client().get("/healthz").status_code == 200
