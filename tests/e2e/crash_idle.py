"""Idle-worker kills through the real stack (issue 28 §1): ``python -m skald.launcher`` with its
default two django-q2 workers; each idle worker in turn is SIGKILLed (as the OOM killer would) and
a message is sent at once. Work must resume: a worker drives its exchange to an outcome. The time from the kill to the
settled exchange is printed, never asserted.

Of two idle workers one waits in ``task_queue.get()`` *holding* the queue's read lock (blocked in
a pipe read), the other waits to take that lock (a futex). Killing the holder would wedge the
cluster; ``skald_qcluster``'s Sentinel sees the idle death at once and exits for the launcher to
start a fresh cluster (the fast path), long before ``/readyz`` could say ``workers: wedged`` (the
backstop). Killing the waiter costs only django-q2's reincarnation. Both are killed, holder first.

``make crash IDLE=n`` runs it n times on the ORM broker (SQLite) and on Redis
(``CRASH_REDIS_URL``, default ``redis://127.0.0.1:6379/7``): ``python -m tests.e2e.crash_idle``.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.e2e.stack import Api, Stack, descendants, launch, wait_for, wait_ready

WORKER_COMM = "skald-qworker"  # skald.workers names its processes so
WORKERS = 2  # django-q2's default in Skald (SKALD_Q_WORKERS)
GUARD = 180.0  # a hang guard, not a time assertion
ROLES = ("lock holder", "lock waiter")
FAST_RESTART = "A qcluster worker died idle"  # the launcher's line for skald_qcluster's QUEUE_LOST_EXIT
WEDGE_RESTART = "Workers are wedged"  # the launcher's line for the /readyz backstop
BROKERS = {
    "orm": {},  # the embedded profile: SQLite, the ORM broker
    "redis": {"REDIS_URL": os.environ.get("CRASH_REDIS_URL", "redis://127.0.0.1:6379/7")},
}


@dataclass(frozen=True)
class Worker:
    pid: int
    wchan: str  # where the kernel has it waiting: a pipe read (lock holder) or a futex (waiter)


@dataclass
class Resume:
    role: str
    victim: Worker
    seconds: float  # from the SIGKILL to the exchange sent right after it settling
    wedged_after: float | None  # when /readyz first said `workers: wedged`, if it did
    restarted: bool  # the launcher replaced the qcluster
    fast_restarts: int = 0  # launcher restarts on the cluster's own exit (QUEUE_LOST_EXIT) meanwhile
    wedge_restarts: int = 0  # launcher restarts on /readyz's `workers: wedged` meanwhile
    told_apart: bool = False  # the kernel showed which worker held the lock (wchan)
    exchange: dict[str, Any] = field(default_factory=dict)


def _wchan(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/wchan").read_text().strip() or "?"
    except OSError:
        return "?"


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def idle_workers(stack: Stack) -> list[Worker] | None:
    """The stack's worker processes when there are ``WORKERS`` of them and all sleep, else None."""
    found = [proc for proc in descendants(stack.process.pid) if _comm(proc.pid) == WORKER_COMM]
    if len(found) != WORKERS or any(proc.state != "S" for proc in found):
        return None
    workers = sorted((Worker(proc.pid, _wchan(proc.pid)) for proc in found), key=lambda w: w.pid)
    if all(w.wchan in {"?", "0"} for w in workers):
        return workers  # the kernel hides where they wait: trust the sleep
    # One reads the task queue's pipe holding its lock, the other waits for that lock.
    return workers if all(_holds_lock(w) or "futex" in w.wchan for w in workers) else None


def _holds_lock(worker: Worker) -> bool:
    return "pipe" in worker.wchan


def pick(workers: list[Worker], role: str) -> Worker:
    """The lock holder (blocked reading the queue's pipe) or a waiter (blocked on the lock);
    by position when the kernel does not say (``wchan`` hidden)."""
    holders = [w for w in workers if _holds_lock(w)]
    waiters = [w for w in workers if not _holds_lock(w)]
    if len(holders) == 1 and waiters:
        return holders[0] if role == ROLES[0] else waiters[0]
    return workers[ROLES.index(role) % len(workers)]


def _workers_state(stack: Stack) -> str:
    try:
        return str(httpx.get(f"{stack.base_url}/readyz", timeout=2.0).json().get("workers"))
    except (httpx.HTTPError, ValueError):
        return "unknown"


def kill_idle_worker(stack: Stack, operator: Api, role: str) -> Resume:
    """SIGKILL the idle worker playing ``role``, send a message to a new session, wait until a
    worker has driven its exchange to an outcome (the demo troubleshooter parks on a job)."""
    workers = wait_for(lambda: idle_workers(stack), timeout=GUARD, interval=0.2, what=f"{WORKERS} idle workers")
    time.sleep(0.5)  # let both settle into get(): the holder reading, the waiter on the lock
    workers = wait_for(lambda: idle_workers(stack), timeout=GUARD, interval=0.2, what=f"{WORKERS} idle workers")
    victim = pick(workers, role)
    told_apart = sum(_holds_lock(w) for w in workers) == 1
    before = {w.pid for w in workers}
    log_before = stack.log()
    os.kill(victim.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    session_id = operator.create_session()["id"]
    posted = operator.send(session_id, f"Checkout returns 502 after killing the {role}")
    wedged_after: float | None = None
    deadline = killed_at + GUARD
    while True:
        row = operator.exchange(session_id, posted["id"])
        if row["status"] != "open":
            seconds = time.monotonic() - killed_at
            break
        if wedged_after is None and _workers_state(stack) == "wedged":
            wedged_after = time.monotonic() - killed_at
        if time.monotonic() > deadline:
            raise AssertionError(f"work did not resume within {GUARD} s after killing the {role} "
                                 f"{victim}:\n{stack.log()[-3000:]}")
        time.sleep(0.1)
    restarted = not (before - {victim.pid}) <= {p.pid for p in descendants(stack.process.pid)}
    log = stack.log()[len(log_before):]
    return Resume(role, victim, seconds, wedged_after, restarted, log.count(FAST_RESTART), log.count(WEDGE_RESTART),
                  told_apart, row)


def campaign(stack: Stack, runs: int = 1) -> list[Resume]:
    """Kill each idle worker in turn, ``runs`` times."""
    wait_ready(stack, timeout=GUARD)
    operator = stack.api("operator")
    return [kill_idle_worker(stack, operator, role) for _ in range(runs) for role in ROLES]


def describe(broker: str, resume: Resume) -> str:
    wedged = f"{resume.wedged_after:5.1f} s" if resume.wedged_after is not None else "   never"
    restart = ("fast path" if resume.fast_restarts else "on wedged" if resume.wedge_restarts else "yes"
               ) if resume.restarted else "no"
    return (f"{broker:6} {resume.role:12} {resume.victim.wchan[:22]:22} resumed after {resume.seconds:5.1f} s; "
            f"readyz wedged after {wedged}; qcluster restarted: {restart}; "
            f"exchange {resume.exchange.get('status')}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make crash IDLE=n", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="kills of each idle worker per broker")
    parser.add_argument("--broker", choices=sorted(BROKERS), action="append")
    args = parser.parse_args(argv)
    failed = False
    for broker in args.broker or list(BROKERS):
        with tempfile.TemporaryDirectory(prefix=f"skald-crash-idle-{broker}-") as home:
            stack = launch(Path(home) / "var", BROKERS[broker])
            try:
                for resume in campaign(stack, args.runs):
                    print(describe(broker, resume), flush=True)
                    failed |= resume.exchange.get("status") not in {"settled", "parked"}
            except AssertionError as exc:
                print(f"{broker}: {exc}", flush=True)
                failed = True
            finally:
                stack.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
