"""Issue 28 §1 on the real stack: SIGKILL each idle django-q2 worker in turn (the one holding the
task queue's read lock, then one waiting for it) and work resumes within the bound, on the ORM
broker and on Redis.

Here on Redis; the ORM broker's run is in ``test_stack_containment`` (the module's shared stack, on
SQLite and on PostgreSQL).

Nothing here asserts an elapsed time. "Within the bound" is told by events: the exchange sent right
after the kill settles while ``/readyz`` has never said ``workers: wedged`` (it says so once work
waited ``SKALD_WORKERS_STALL_SECONDS``), and a cluster that lost its queue was replaced by the fast
path (``skald_qcluster`` exiting at once), never by the wedge watchdog. The measured time to resume
is printed.
"""

from __future__ import annotations

import pytest

from tests.e2e.crash_idle import BROKERS, campaign, describe
from tests.e2e.stack import Launch

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.mark.parametrize("broker", ["redis"])
def test_killing_each_idle_worker_in_turn_resumes_work_within_the_bound(
        launch_stack: Launch, broker: str, capsys: pytest.CaptureFixture[str],
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
    # A worker drove each turn: the demo troubleshooter parks on its job (or has settled already)...
    assert all(r.exchange["status"] in {"parked", "settled"} for r in resumed), [r.exchange for r in resumed]
    # ...before readiness could call the workers wedged, and no cluster was replaced for being wedged.
    assert [r.wedged_after for r in resumed] == [None, None], [describe(broker, r) for r in resumed]
    assert [r.wedge_restarts for r in resumed] == [0, 0], stack.log()[-3000:]
    holder, waiter = resumed
    # The holder took the queue's lock with it: its cluster exited at once and the launcher replaced it.
    assert holder.restarted and holder.fast_restarts == 1, describe(broker, holder)
    if waiter.told_apart:  # the kernel showed the lock held by a live worker: plain reincarnation
        assert not waiter.restarted and waiter.fast_restarts == 0, describe(broker, waiter)
