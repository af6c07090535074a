"""A zombie worker's workspace write is never applied (issue 28 §2).

Real processes on two workspace roots (two machines), the real store and audit chain, SQLite and
PostgreSQL (``db_sensitive``): worker A is SIGSTOPped while its allow-listed command runs, past its
lease; worker B takes over (the command is recorded ``interrupted``) and writes a newer
``notes.md``; A is SIGCONTed. Every wait is on rows or files, with a generous guard
(``tests.e2e.crash_zombie``; ``make crash`` runs it N times).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.crash import Database, pass_database
from tests.e2e.crash_zombie import violations, zombie_once
from tests.e2e.zombie_worker import NEWER

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.db_sensitive]


@pytest.fixture(scope="module")
def zombie_db() -> Iterator[Database]:
    with pass_database() as db:
        yield db


def test_a_worker_stopped_past_its_lease_never_applies_its_stale_write(zombie_db):
    report = zombie_once(zombie_db)
    assert violations(report) == []
    assert report["effects"] == 1 and report["stale_applied"] == 0
    assert report["notes"] == NEWER  # the newer version written by the worker that took over
    refusal = next(r for r in report["refused"] if r["tool"] == "execute_cmd")
    assert (refusal["reason"], refusal["targets"]) == ("lease_lost", ["notes.md"])
    assert report["a_exit"] == 3  # worker A stopped at its refused write (LeaseLost), having written nothing
