"""The keyed benchmark (`bench --keyed`), small: through the API, a real `qcluster` and the fast
remote, one key's backlog does not hold back another key's first call, and no key ever has more
calls in flight than its limit."""

from __future__ import annotations

import pytest

from testbed.bench import keyed
from tests.processes import database_url

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(600)
def test_the_keyed_benchmark_shows_fairness_across_keys_and_the_limit_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its web process and cluster take the environment's database: the test's.
    monkeypatch.setenv("DATABASE_URL", database_url())
    results = keyed.run(
        jobs=40, backlog=30, keys=4, steps=2, rounds=1, workers=4, gunicorn=False, log=print, scratch=False
    )
    # Keyed: B's first call went out behind at most A's first two (the limit), never behind all.
    assert results["fairness_keyed"]["a_first_calls_before_b"] <= keyed.LIMIT
    # Unkeyed: B's first call waited behind A's (all but those the four workers took at once).
    assert results["fairness_unkeyed"]["a_first_calls_before_b"] >= 30 - 4
    assert results["fairness_keyed"]["most_in_flight_per_key"] <= keyed.LIMIT
    assert max(results["most_in_flight_per_key"]) <= keyed.LIMIT
    assert results["ratio"] > 0
    assert "keyed / unkeyed" in keyed.table(results)
