"""Kill the worker at each failpoint, restart it, check the invariants (SPEC R1, R2).

Real processes, real SIGKILL, the real store and audit chain on a fresh database per run (SQLite,
and PostgreSQL when the suite runs there): worker processes that run the kernel (every point, the
frame tree's too), and the real stack (daphne + qcluster + the sweeper) at two points. ``make crash``
runs the kernel cases N times, ``make crash STACK=1`` every stack point N times.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.e2e.crash import CASES, crash_once, violations
from tests.e2e.crash_stack import CASES as STACK_CASES
from tests.e2e.crash_stack import crash_once as stack_crash_once
from tests.loop.providers.fake_openai_server import FakeOpenAIServer

# The kernel's crash points run on both databases (db_sensitive). The real-stack points run on one:
# what they add over the kernel's (daphne, the qcluster, the sweeper restarting and recovering on
# their own) does not depend on the database, and each costs three stack boots; the row locks and
# lease claims a recovery takes on PostgreSQL are the kernel cases' and tests/skald/test_races.py's.
pytestmark = [pytest.mark.e2e]


@pytest.mark.db_sensitive
@pytest.mark.parametrize(("scenario", "point"), CASES, ids=[f"{s}:{p}" for s, p in CASES])
def test_a_worker_killed_at_the_point_loses_nothing_and_recovery_settles_it(crash_db, scenario, point):
    report = crash_once(crash_db, scenario, point)
    assert violations(report) == []
    history = 3 if scenario == "compaction" else 0  # the turns the compacting turn summarises
    assert len(report["effects"]) <= history + 1  # the effect tool declares MARK_INTERRUPTED: never twice
    if scenario == "compaction":  # a complete compaction (row and probe) whichever side of it the worker died
        assert report["compactions"] == report["probes"] == 1


@pytest.fixture(scope="module")
def fake_models() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        yield fake


# A stack boots three times per case (~70 s): the suite kills one worker mid-turn and one running an
# approved call; `make crash STACK=1` runs every point N times.
SUITE_STACK_CASES = (("turn", "loop.after_claim"), ("approval", "loop.inside_tool"))
assert set(SUITE_STACK_CASES) <= set(STACK_CASES)


@pytest.mark.parametrize(("scenario", "point"), SUITE_STACK_CASES,
                         ids=[f"stack:{s}:{p}" for s, p in SUITE_STACK_CASES])
def test_a_real_stack_killed_at_the_point_loses_nothing_and_its_restart_settles_it(fake_models, scenario, point):
    """The same through daphne + qcluster + the sweeper (``tests.e2e.crash_stack``): the web process
    or a worker dies at the point, a restarted stack recovers on its own."""
    postgres = os.environ["DATABASE_URL"] if connection.vendor == "postgresql" else ""
    report = stack_crash_once(fake_models, scenario, point, postgres=postgres)
    assert violations(report) == []
    assert len(report["effects"]) <= 1  # execute_cmd declares MARK_INTERRUPTED: never twice
