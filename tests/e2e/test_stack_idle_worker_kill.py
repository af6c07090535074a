"""Issue 28 §1 on the real stack: SIGKILL each idle django-q2 worker in turn (the one holding the
task queue's read lock, then one waiting for it) and work resumes, on the ORM broker and on Redis.

Nothing here asserts an elapsed time: each kill waits for an event (a worker drives the next
exchange to an outcome) under a generous hang guard; the measured time to resume is printed.
"""

from __future__ import annotations

import pytest

from tests.e2e.crash_idle import BROKERS, campaign, describe
from tests.e2e.stack import Launch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("broker", sorted(BROKERS))
def test_killing_each_idle_worker_in_turn_never_stops_work(launch_stack: Launch, broker: str,
                                                          capsys: pytest.CaptureFixture[str],
                                                          record_property: pytest.RecordProperty) -> None:
    stack = launch_stack(BROKERS[broker])
    try:
        resumed = campaign(stack)
    finally:
        stack.stop()
    with capsys.disabled():
        print()
        for resume in resumed:
            print(describe(broker, resume))
            record_property(f"time_to_resume_{resume.role.replace(' ', '_')}", round(resume.seconds, 1))
    # A worker drove each turn: the demo troubleshooter parks on its job (or has settled already).
    assert all(r.exchange["status"] in {"parked", "settled"} for r in resumed), [r.exchange for r in resumed]
    holder = resumed[0]
    if holder.wedged_after is not None:  # the kernel showed which worker held the lock: it wedged
        assert holder.restarted, "readyz said wedged but the launcher never replaced the qcluster"
