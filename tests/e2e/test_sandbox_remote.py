"""The sandbox remote, run as the real `manage.py sandbox_remote` process and spoken to over HTTP.

No database is needed: the sandbox keeps its own SQLite file under the test's tmp directory.
"""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

pytestmark = pytest.mark.e2e

PROJECT_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
READY_PREFIX = "sandbox remote listening on "


@dataclass
class Remote:
    """A running sandbox process and a client bound to it."""

    url: str
    process: subprocess.Popen[str]
    client: httpx.Client

    def post(
        self,
        path: str,
        *,
        key: str | None,
        input: dict[str, Any] | None = None,
        attempt: int = 1,
        timeout: float | None = None,
        **extra: Any,
    ) -> httpx.Response:
        """POST the body the scheduler sends, with `key` as Idempotency-Key (None = no header)."""
        body = {
            "job_id": "job-1",
            "step": path.rsplit("/", 1)[-1],
            "operation_id": key,
            "attempt": attempt,
            "input": {} if input is None else input,
            "results": {},
            **extra,
        }
        headers = {"X-SAS-Attempt": str(attempt)}
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.client.post(
            path,
            json=body,
            headers=headers,
            timeout=timeout if timeout is not None else self.client.timeout,
        )

    def stats(self) -> dict[str, Any]:
        response = self.client.get("/stats")
        response.raise_for_status()
        return response.json()

    def configure(self, **patch: Any) -> dict[str, Any]:
        response = self.client.post("/config", json=patch)
        response.raise_for_status()
        return response.json()


def _pump(stream: Any, lines: queue.Queue[str | None]) -> None:
    # Keeps draining after the ready line so that the child can never block on a full pipe.
    for line in stream:
        lines.put(line)
    lines.put(None)


@contextmanager
def running_remote(db: Path, *flags: str) -> Iterator[Remote]:
    """Start `manage.py sandbox_remote` on a free port, wait for its ready line, stop it after."""
    stderr_path = db.with_suffix(".stderr")
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "sandbox_remote", "--port", "0", "--db", str(db), *flags],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()
    pump = threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True)
    pump.start()
    try:
        url = _wait_ready(lines, stderr_path)
        with httpx.Client(base_url=url, timeout=5.0, trust_env=False) as client:
            yield Remote(url=url, process=process, client=client)
    finally:
        stop(process)
        pump.join(STOP_TIMEOUT)
        process.stdout.close()


def _wait_ready(lines: queue.Queue[str | None], stderr_path: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        if line.startswith(READY_PREFIX):
            return line.removeprefix(READY_PREFIX).strip()
    pytest.fail(f"sandbox remote did not become ready:\n{stderr_path.read_text()}")


def stop(process: subprocess.Popen[str]) -> int:
    """SIGTERM, then kill if it does not stop in time; the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait()


@pytest.fixture(scope="module")
def shared_remote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    with running_remote(tmp_path_factory.mktemp("sandbox") / "s.sqlite3", "--reset") as remote:
        yield remote


@pytest.fixture
def remote(shared_remote: Remote) -> Remote:
    """The module's sandbox, wiped and back to its start configuration."""
    response = shared_remote.client.post("/reset", json={"config": True})
    response.raise_for_status()
    return shared_remote


def new_key() -> str:
    return f"op-{uuid.uuid4()}"


# --- idempotency ---------------------------------------------------------------------------------


def test_repeated_key_returns_stored_answer_without_second_effect(remote: Remote) -> None:
    key = new_key()
    first = remote.post("/payments/charge", key=key, input={"amount": 42}, attempt=1)
    second = remote.post("/payments/charge", key=key, input={"amount": 42}, attempt=2)

    assert first.status_code == 200
    assert first.json()["amount"] == 42
    assert "idempotent-replayed" not in first.headers
    assert second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["idempotent-replayed"] == "true"
    stats = remote.stats()
    assert stats["effects"] == {key: 1}
    assert stats["replays"] == 1
    assert stats["deliveries"] == {key: 2}
    assert stats["duplicates"] == 0


def test_same_key_with_different_body_is_refused_with_422(remote: Remote) -> None:
    key = new_key()
    remote.post("/payments/charge", key=key, input={"amount": 10})

    reused = remote.post("/payments/charge", key=key, input={"amount": 11})

    assert reused.status_code == 422
    assert reused.json() == {"error": "idempotency key reused with a different request"}
    assert remote.stats()["effects"] == {key: 1}


def test_same_key_on_a_different_path_is_refused_with_422(remote: Remote) -> None:
    key = new_key()
    remote.post("/payments/charge", key=key, input={"amount": 10})

    reused = remote.post("/shipping/schedule", key=key, input={"amount": 10}, step="charge")

    assert reused.status_code == 422


def test_attempt_field_alone_differing_is_the_same_request(remote: Remote) -> None:
    key = new_key()
    first = remote.post("/inventory/reserve", key=key, input={"sku": "A-1", "quantity": 3}, attempt=1)
    retry = remote.post("/inventory/reserve", key=key, input={"sku": "A-1", "quantity": 3}, attempt=7)

    assert first.json() == {"reservation_id": first.json()["reservation_id"], "sku": "A-1", "quantity": 3}
    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == first.json()


def test_concurrent_requests_with_one_key_produce_exactly_one_effect(remote: Remote) -> None:
    key = new_key()
    threads = 8
    barrier = threading.Barrier(threads)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def send(attempt: int) -> None:
        barrier.wait()
        response = remote.post("/payments/charge", key=key, input={"amount": 5}, attempt=attempt)
        with lock:
            answers.append(response)

    workers = [threading.Thread(target=send, args=(n,)) for n in range(1, threads + 1)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    assert [a.status_code for a in answers] == [200] * threads
    assert len({a.json()["charge_id"] for a in answers}) == 1
    assert sum(a.headers.get("idempotent-replayed") == "true" for a in answers) == threads - 1
    stats = remote.stats()
    assert stats["effects"] == {key: 1}
    assert stats["replays"] == threads - 1


def test_honor_keys_off_lets_a_repeated_key_cause_a_second_effect(remote: Remote) -> None:
    remote.configure(honor_keys=False)
    key = new_key()

    remote.post("/payments/charge", key=key, input={"amount": 5})
    remote.post("/payments/charge", key=key, input={"amount": 5}, attempt=2)

    stats = remote.stats()
    assert stats["effects"] == {key: 2}
    assert stats["duplicates"] == 1


def test_no_idempotency_flag_makes_a_repeated_key_produce_two_effects(tmp_path: Path) -> None:
    with running_remote(tmp_path / "s.sqlite3", "--reset", "--no-idempotency") as remote:
        key = new_key()
        first = remote.post("/shipping/schedule", key=key)
        second = remote.post("/shipping/schedule", key=key, attempt=2)

        assert first.status_code == second.status_code == 200
        assert "idempotent-replayed" not in second.headers
        assert first.json()["shipment_id"] != second.json()["shipment_id"]
        stats = remote.stats()
        assert stats["effects"] == {key: 2}
        assert stats["effects_by_kind"] == {"schedule": 2}
        assert stats["duplicates"] == 1
        assert stats["replays"] == 0


# --- business failures ---------------------------------------------------------------------------


def test_decline_over_the_limit_is_a_402_replayed_for_the_same_key(remote: Remote) -> None:
    remote.configure(decline_over=100)
    key = new_key()

    declined = remote.post("/payments/charge", key=key, input={"amount": 150})
    remote.configure(decline_over=None)
    replayed = remote.post("/payments/charge", key=key, input={"amount": 150}, attempt=2)

    assert declined.status_code == 402
    assert declined.json() == {"error": "card declined", "amount": 150}
    assert replayed.status_code == 402
    assert replayed.json() == declined.json()
    assert replayed.headers["idempotent-replayed"] == "true"
    stats = remote.stats()
    assert stats["effects"] == {}
    assert stats["faults"]["decline"] == 1


def test_amount_at_the_limit_is_charged(remote: Remote) -> None:
    remote.configure(decline_over=100)

    assert remote.post("/payments/charge", key=new_key(), input={"amount": 100}).status_code == 200


def test_a_quantity_over_the_limit_is_refused_by_inventory_and_shipping_but_not_payments(
    remote: Remote,
) -> None:
    remote.configure(decline_quantity_over=5)

    reserve = remote.post("/inventory/reserve", key=new_key(), input={"quantity": 6})
    schedule = remote.post("/shipping/schedule", key=new_key(), input={"quantity": 6})
    at_limit = remote.post("/shipping/schedule", key=new_key(), input={"quantity": 5})
    charge = remote.post("/payments/charge", key=new_key(), input={"quantity": 6, "amount": 10})

    assert (reserve.status_code, reserve.json()) == (402, {"error": "out of stock"})
    assert (schedule.status_code, schedule.json()) == (402, {"error": "no shipping slot available"})
    assert at_limit.status_code == 200 and charge.status_code == 200
    assert remote.stats()["faults"]["decline"] == 2


def test_stats_name_the_job_step_and_item_each_key_was_called_for(remote: Remote) -> None:
    item, undo = new_key(), new_key()

    remote.post("/shipping/schedule", key=item, index=3)
    remote.post("/shipping/schedule", key=item, index=3, attempt=2)
    remote.post("/shipping/cancel", key=undo, index=3, compensates=item)
    remote.post("/inventory/reserve", key=None)  # refused, still a delivery

    callers = remote.stats()["callers"]
    assert sorted(callers, key=lambda c: c[1]) == [
        ["job-1", "cancel", 3, 1, undo, 1],
        ["job-1", "reserve", None, 0, None, 1],
        ["job-1", "schedule", 3, 0, item, 2],
    ]


def test_scripted_decline_is_a_stored_business_failure(remote: Remote) -> None:
    remote.configure(script={"/inventory/reserve": ["decline"]})
    key = new_key()

    declined = remote.post("/inventory/reserve", key=key, input={"sku": "A-1"})
    replayed = remote.post("/inventory/reserve", key=key, input={"sku": "A-1"}, attempt=2)

    assert declined.status_code == 402
    assert declined.json() == {"error": "out of stock"}
    assert replayed.status_code == 402
    assert replayed.headers["idempotent-replayed"] == "true"
    assert remote.stats()["effects"] == {}


# --- faults --------------------------------------------------------------------------------------


def test_drop_commits_the_effect_but_sends_no_answer_and_the_retry_gets_the_stored_answer(
    remote: Remote,
) -> None:
    remote.configure(script={"/payments/charge": ["drop"]})
    key = new_key()

    with pytest.raises(httpx.TransportError):
        remote.post("/payments/charge", key=key, input={"amount": 7})
    stats = remote.stats()
    retry = remote.post("/payments/charge", key=key, input={"amount": 7}, attempt=2)

    assert stats["effects"] == {key: 1}
    assert stats["faults"]["drop"] == 1
    assert retry.status_code == 200
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["amount"] == 7
    assert remote.stats()["effects"] == {key: 1}


def test_drop_with_a_hold_times_the_caller_out_after_the_effect(remote: Remote) -> None:
    remote.configure(drop_rate=1.0, drop_hold_ms=1000)
    key = new_key()

    with pytest.raises(httpx.TimeoutException):
        remote.post("/shipping/schedule", key=key, timeout=0.3)

    assert remote.stats()["effects"] == {key: 1}


def test_error_rate_one_answers_503_and_stores_nothing(remote: Remote) -> None:
    remote.configure(error_rate=1.0)
    key = new_key()

    failed = remote.post("/payments/charge", key=key, input={"amount": 3})
    remote.configure(error_rate=0.0)
    retry = remote.post("/payments/charge", key=key, input={"amount": 3}, attempt=2)

    assert failed.status_code == 503
    assert failed.json() == {"error": "injected failure"}
    assert retry.status_code == 200
    assert "idempotent-replayed" not in retry.headers
    stats = remote.stats()
    assert stats["effects"] == {key: 1}
    assert stats["faults"]["error"] == 1
    assert stats["deliveries"] == {key: 2}


def test_latency_delays_the_answer_and_the_effect_happens_after_the_delay(remote: Remote) -> None:
    remote.configure(latency_ms=2000)
    key = new_key()
    answers: list[httpx.Response] = []

    started = time.monotonic()
    caller = threading.Thread(target=lambda: answers.append(remote.post("/shipping/schedule", key=key)))
    caller.start()
    # The remote counts a slow request when it starts holding it: ask about the operation then,
    # not after a guessed pause.
    deadline = time.monotonic() + 10
    while remote.stats()["faults"]["slow"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    during = remote.client.get(f"/shipping/shipments/{key}")
    caller.join()
    elapsed = time.monotonic() - started

    # While the request is being processed, a status query can say neither yes nor no.
    assert during.status_code == 409
    assert during.json()["error"] == "operation in progress"
    assert answers[0].status_code == 200
    assert elapsed >= 2.0
    assert remote.client.get(f"/shipping/shipments/{key}").status_code == 200
    assert remote.stats()["faults"]["slow"] == 1


def test_script_actions_apply_in_order_then_the_rates_take_over(remote: Remote) -> None:
    config = remote.configure(script={"/payments/charge": ["error", "slow:1", "ok"]})
    assert config["script"] == {"/payments/charge": ["error", "slow:1", "ok"]}

    statuses = [remote.post("/payments/charge", key=new_key()).status_code for _ in range(4)]

    assert statuses == [503, 200, 200, 200]
    assert remote.client.get("/config").json()["script"] == {"/payments/charge": []}
    faults = remote.stats()["faults"]
    assert {k: faults[k] for k in ("error", "drop", "slow", "decline")} == {
        "error": 1,
        "drop": 0,
        "slow": 1,
        "decline": 0,
    }
    assert not any(faults[k] for k in ("reply_lost", "reply_duplicate", "reply_late", "reply_unknown"))


def test_script_only_applies_to_its_own_path(remote: Remote) -> None:
    remote.configure(script={"/payments/refund": ["error"]})

    assert remote.post("/payments/charge", key=new_key()).status_code == 200


# --- compensations and status queries ------------------------------------------------------------


def test_compensation_of_an_operation_that_happened_records_an_undone_effect(remote: Remote) -> None:
    charge_key, refund_key = new_key(), new_key()
    charge = remote.post("/payments/charge", key=charge_key, input={"amount": 9})

    refund = remote.post(
        "/payments/refund",
        key=refund_key,
        input={"amount": 9},
        compensates=charge_key,
        original_output=charge.json(),
    )
    replay = remote.post(
        "/payments/refund",
        key=refund_key,
        input={"amount": 9},
        attempt=2,
        compensates=charge_key,
        original_output=charge.json(),
    )

    assert refund.status_code == 200
    assert refund.json() == {"undone": charge_key}
    assert replay.json() == refund.json()
    assert replay.headers["idempotent-replayed"] == "true"
    stats = remote.stats()
    assert stats["effects"] == {charge_key: 1, refund_key: 1}
    assert stats["effects_by_kind"] == {"charge": 1, "refund": 1}


def test_compensation_of_an_operation_that_never_happened_is_a_noop_without_effect(
    remote: Remote,
) -> None:
    key = new_key()

    release = remote.post("/inventory/release", key=key, compensates=new_key(), original_output=None)

    assert release.status_code == 200
    assert release.json() == {"noop": True, "reason": "nothing to undo"}
    assert remote.stats()["effects"] == {}
    assert remote.client.get(f"/inventory/reservations/{key}").json() == release.json()


def test_an_original_arriving_after_its_compensation_is_refused_without_effect(remote: Remote) -> None:
    charge_key = new_key()
    remote.post("/payments/refund", key=new_key(), compensates=charge_key)

    late = remote.post("/payments/charge", key=charge_key, input={"amount": 3})

    assert late.status_code == 409
    assert "voided" in late.json()["error"]
    assert remote.stats()["effects"] == {}
    assert remote.stats()["voided"] == 1


def test_compensation_of_a_declined_charge_is_a_noop(remote: Remote) -> None:
    remote.configure(decline_over=1)
    charge_key = new_key()
    remote.post("/payments/charge", key=charge_key, input={"amount": 2})

    refund = remote.post("/payments/refund", key=new_key(), compensates=charge_key)

    assert refund.json() == {"noop": True, "reason": "nothing to undo"}
    assert remote.stats()["effects"] == {}


def test_compensation_only_undoes_an_operation_of_its_own_service(remote: Remote) -> None:
    charge_key = new_key()
    remote.post("/payments/charge", key=charge_key, input={"amount": 2})

    cancel = remote.post("/shipping/cancel", key=new_key(), compensates=charge_key)

    assert cancel.json() == {"noop": True, "reason": "nothing to undo"}


def test_status_query_is_404_before_the_operation_and_200_after(remote: Remote) -> None:
    key = new_key()

    before = remote.client.get(f"/payments/{key}")
    charge = remote.post("/payments/charge", key=key, input={"amount": 12})
    after = remote.client.get(f"/payments/{key}")

    assert before.status_code == 404
    assert before.json() == {"error": "unknown operation"}
    assert after.status_code == 200
    assert after.json() == charge.json()
    assert remote.client.get(f"/inventory/reservations/{key}").status_code == 404
    assert remote.stats()["status_queries"] == 3


def test_status_query_of_an_operation_id_with_a_slash_names_it_quoted(remote: Remote) -> None:
    key = f"{new_key()}/bill"  # a child job's step
    charge = remote.post("/payments/charge", key=key, input={"amount": 12})

    quoted = remote.client.get(f"/payments/{quote(key, safe='')}")

    assert quoted.status_code == 200 and quoted.json() == charge.json()
    assert remote.client.get(f"/payments/{key}").json() != charge.json()  # two segments: not a query


def test_status_query_of_a_declined_operation_is_404(remote: Remote) -> None:
    remote.configure(decline_over=1)
    key = new_key()
    remote.post("/payments/charge", key=key, input={"amount": 2})

    assert remote.client.get(f"/payments/{key}").status_code == 404


def test_status_queries_are_never_faulted(remote: Remote) -> None:
    remote.configure(error_rate=1.0, drop_rate=1.0)

    assert remote.client.get(f"/shipping/shipments/{new_key()}").status_code == 404


# --- malformed requests --------------------------------------------------------------------------


def test_missing_idempotency_key_is_400_and_does_nothing(remote: Remote) -> None:
    response = remote.post("/payments/charge", key=None, input={"amount": 1})

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]
    stats = remote.stats()
    assert stats["effects"] == {}
    assert stats["requests"] == 1


def test_bad_json_is_400(remote: Remote) -> None:
    response = remote.client.post(
        "/payments/charge", content=b"{not json", headers={"Idempotency-Key": new_key()}
    )

    assert response.status_code == 400
    assert response.json() == {"error": "body is not valid JSON"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ([1, 2], "body must be a JSON object"),
        ({"input": "sku-1"}, "input must be a JSON object"),
        ({"input": {"quantity": "two"}}, "input.quantity must be an integer"),
    ],
)
def test_body_of_the_wrong_shape_is_400(remote: Remote, body: Any, error: str) -> None:
    response = remote.client.post("/inventory/reserve", json=body, headers={"Idempotency-Key": new_key()})

    assert response.status_code == 400
    assert response.json() == {"error": error}
    assert remote.stats()["effects"] == {}


def test_missing_input_fields_take_defaults(remote: Remote) -> None:
    response = remote.client.post("/inventory/reserve", json={}, headers={"Idempotency-Key": new_key()})

    assert response.status_code == 200
    assert response.json()["sku"] == "unknown"
    assert response.json()["quantity"] == 1


def test_unknown_path_is_404(remote: Remote) -> None:
    assert remote.post("/payments/teleport", key=new_key()).status_code == 404
    assert remote.client.get("/nowhere").status_code == 404


def test_body_over_one_mebibyte_is_413(remote: Remote) -> None:
    response = remote.client.post(
        "/payments/charge",
        content=b"x" * (1024 * 1024 + 1),
        headers={"Idempotency-Key": new_key(), "Content-Type": "application/json"},
    )

    assert response.status_code == 413


# --- control routes ------------------------------------------------------------------------------


def test_health_answers_ok(remote: Remote) -> None:
    assert remote.client.get("/health").json() == {"ok": True}


@pytest.mark.parametrize(
    "patch",
    [
        {"error_rate": 1.5},
        {"drop_rate": -0.1},
        {"latency_rate": "half"},
        {"honor_keys": "yes"},
        {"decline_over": "lots"},
        {"decline_quantity_over": 2.5},
        {"errror_rate": 0.5},
        {"script": {"/payments/charge": ["explode"]}},
    ],
)
def test_config_refuses_invalid_values_and_changes_nothing(remote: Remote, patch: dict[str, Any]) -> None:
    before = remote.client.get("/config").json()

    response = remote.client.post("/config", json={"error_rate": 0.5, **patch})

    assert response.status_code == 400
    assert remote.client.get("/config").json() == before


def test_reset_wipes_the_store_and_scripts_but_keeps_the_config(remote: Remote) -> None:
    remote.configure(decline_over=50, script={"/payments/charge": ["error"]})
    remote.post("/shipping/schedule", key=new_key())

    remote.client.post("/reset").raise_for_status()

    config = remote.client.get("/config").json()
    assert config["decline_over"] == 50
    assert config["script"] == {}
    stats = remote.stats()
    assert stats["effects"] == {}
    assert stats["requests"] == 0
    remote.client.post("/reset", json={"config": True}).raise_for_status()
    assert remote.client.get("/config").json()["decline_over"] is None


# --- the process ---------------------------------------------------------------------------------


def test_flags_set_the_initial_config_and_the_store_survives_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "s.sqlite3"
    key = new_key()
    flags = ("--decline-over", "100", "--latency-ms", "5", "--drop-hold-ms", "7", "--seed", "3")
    with running_remote(db, "--reset", *flags) as remote:
        config = remote.client.get("/config").json()
        first = remote.post("/payments/charge", key=key, input={"amount": 20})
        exit_code = stop(remote.process)

    assert exit_code == 0
    assert config == {
        "error_rate": 0.0,
        "latency_ms": 5,
        "latency_rate": 1.0,
        "drop_rate": 0.0,
        "drop_hold_ms": 7,
        "decline_over": 100.0,
        "decline_quantity_over": None,
        "honor_keys": True,
        "async_delay_ms": 0,
        "reply_loss_rate": 0.0,
        "reply_duplicate_rate": 0.0,
        "reply_late_rate": 0.0,
        "reply_late_ms": 0,
        "reply_unknown_rate": 0.0,
        "hostile_rate": 0.0,
        "trickle_ms": 1000,
        "script": {},
    }
    with running_remote(db) as remote:
        replay = remote.post("/payments/charge", key=key, input={"amount": 20}, attempt=2)
        assert replay.headers["idempotent-replayed"] == "true"
        assert replay.json() == first.json()
        assert remote.stats()["effects"] == {key: 1}
    with running_remote(db, "--reset") as remote:
        assert remote.stats()["effects"] == {}


def test_hostile_answers_come_after_the_work_and_are_each_what_they_claim(remote: Remote) -> None:
    remote.configure(hostile_rate=1.0, trickle_ms=200, decline_over=100)
    # A refusal is answered as it is and takes no kind's turn: the next five successes still
    # meet every kind (a turn taken by each refusal once made a short campaign miss one).
    assert remote.post("/payments/charge", key="declined", input={"amount": 500}).status_code == 402
    seen: dict[str, Any] = {}
    for n, kind in enumerate(("trickle", "huge", "bomb", "unstorable", "bad_header")):
        key = f"hostile-{n}"
        request = remote.client.build_request(
            "POST",
            "/payments/charge",
            json={
                "job_id": "j",
                "step": "charge",
                "operation_id": key,
                "attempt": 1,
                "input": {},
                "results": {},
            },
            headers={"Idempotency-Key": key, "Accept-Encoding": "identity"},
        )
        try:
            response = remote.client.send(request, stream=True)
        except httpx.RemoteProtocolError as exc:
            seen[kind] = f"refused: {exc}"
        else:
            try:
                raw = response.iter_raw()
                first = next(raw)
                seen[kind] = (response.status_code, response.headers.get("content-length"), first[:20])
                if kind == "trickle":
                    started = time.monotonic()
                    next(raw)
                    seen["trickle_pause"] = time.monotonic() - started
                elif kind == "unstorable":
                    seen[kind] = first + b"".join(raw)
                elif kind == "bomb":
                    assert response.headers["content-encoding"] == "gzip"
                    seen[kind] = len(first + b"".join(raw))
            finally:
                response.close()
        # The work was done before the answer: its status says so.
        assert remote.client.get(f"/payments/{key}").status_code == 200, kind
    assert seen["trickle"][:2] == (200, str(50 * 1024 * 1024)) and seen["trickle_pause"] >= 0.15
    assert seen["huge"][:2] == (200, str(50 * 1024 * 1024))
    assert seen["bomb"] < 1024 * 1024  # 50 MB once inflated
    assert b"NaN" in seen["unstorable"] or b"\\u0000" in seen["unstorable"] or b"1e999" in seen["unstorable"]
    assert str(seen["bad_header"]).startswith("refused")
    hostile = remote.stats()["hostile"]
    assert hostile == {"trickle": 1, "huge": 1, "bomb": 1, "unstorable": 1, "bad_header": 1}
    assert sum(remote.stats()["effects"].values()) == 5
