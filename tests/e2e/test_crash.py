"""Kill the worker at each failpoint, restart it, check the invariants (SPEC R1, R2).

Real processes, real SIGKILL, the real store and audit chain on a fresh database per run (SQLite,
and PostgreSQL when the suite runs there). ``make crash`` runs the same cases N times.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.e2e.crash import CASES, Database, crash_once, database, violations

pytestmark = [pytest.mark.e2e, pytest.mark.db_sensitive]


@pytest.fixture(scope="module")
def crash_db() -> Iterator[Database]:
    if connection.vendor == "postgresql":
        with database("postgresql", os.environ["DATABASE_URL"]) as db:
            yield db
    else:
        with database("sqlite") as db:
            yield db


@pytest.mark.parametrize(("scenario", "point"), CASES, ids=[f"{s}:{p}" for s, p in CASES])
def test_a_worker_killed_at_the_point_loses_nothing_and_recovery_settles_it(crash_db, scenario, point):
    report = crash_once(crash_db, scenario, point)
    assert violations(report) == []
    history = 3 if scenario == "compaction" else 0  # the turns the compacting turn summarises
    assert len(report["effects"]) <= history + 1  # the effect tool declares MARK_INTERRUPTED: never twice
    if scenario == "compaction":  # a complete compaction (row and probe) whichever side of it the worker died
        assert report["compactions"] == report["probes"] == 1
