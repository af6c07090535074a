"""Kill the worker between a job run's end and its delivery, or during a dead letter's retry (issue
27): a restarted worker's sweep delivers every ending exactly once and strands nothing.

Real processes, real SIGKILL at the failpoint, the product's job services and django-q2 entry points
on a fresh database per run (``tests.e2e.crash_jobs``). The suite runs each jobs point once, on
SQLite and PostgreSQL (a case is three worker processes: a few seconds); ``make crash`` runs every
case of the table N times.
"""

from __future__ import annotations

import pytest

from tests.e2e.crash_jobs import CASES, SUITE_CASES, crash_once, violations

pytestmark = [pytest.mark.e2e]
assert set(SUITE_CASES) <= set(CASES)


@pytest.mark.db_sensitive
@pytest.mark.parametrize(("scenario", "point"), SUITE_CASES, ids=[f"{s}:{p}" for s, p in SUITE_CASES])
def test_a_worker_killed_around_a_jobs_delivery_strands_nothing_and_the_sweep_delivers_once(
        crash_db, scenario, point):
    report = crash_once(crash_db, scenario, point)
    assert violations(report) == []
    assert report["due_at_restart"] == 1  # the dead worker had ended the run and not delivered it
    (run,) = report["runs"]
    assert run["delivered"] and (run["ended"], run["delivered_audit"], run["delivered_updates"]) == (1, 1, 1)
    assert report["undelivered"] == report["stranded"] == 0
    if scenario == "async":
        assert run["task_completed"] == 1  # the parent read the ending once
