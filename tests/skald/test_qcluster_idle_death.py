"""``skald_qcluster`` (issue 28 §1): a worker killed idle may take the task queue's read lock with
it; the Sentinel then abandons the cluster (exit 75) instead of reincarnating into a dead queue.
A worker killed busy, recycled or timed out is django-q2's ordinary reincarnation."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import pytest
from django_q.queues import Queue

from skald.launcher import QUEUE_LOST_EXIT
from skald.management.commands import skald_qcluster
from skald.management.commands.skald_qcluster import SkaldSentinel, died_idle, live_reader, lock_free


@dataclass
class Timer:
    value: float


@dataclass(eq=False)
class FakeWorker:
    exitcode: int | None
    timer: Timer
    pid: int = 0
    name: str = "Process-fake"
    joined: list[float] = field(default_factory=list)

    def join(self, timeout: float | None = None) -> None:
        self.joined.append(timeout or 0.0)


@pytest.mark.parametrize(("exitcode", "timer", "idle"), [
    (-9, -1, True),  # SIGKILLed waiting for a task
    (-15, -1, True),
    (-9, 903, False),  # SIGKILLed mid-task: it held no queue lock
    (None, 0, False),  # django-q2's timeout: alive, the guard terminates it
    (0, -2, False),  # recycled after its task quota
    (1, -1, False),  # exited by itself, not killed
])
def test_only_a_worker_killed_while_its_timer_said_idle_counts(exitcode, timer, idle):
    assert died_idle(FakeWorker(exitcode, Timer(timer))) is idle


def _wait_in_get(queue: Any) -> None:
    queue.get()


def _blocked(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "S"


def test_a_reader_killed_in_get_takes_the_queue_lock_with_it():
    queue = Queue()
    assert lock_free(queue)
    reader = multiprocessing.get_context("fork").Process(target=_wait_in_get, args=(queue,))
    reader.start()
    deadline = time.monotonic() + 10
    while not (_blocked(reader.pid) and not lock_free(queue, wait=0.0)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lock_free(queue), "the reader holds the lock while it waits for a task"
    os.kill(reader.pid, signal.SIGKILL)
    reader.join()
    assert not lock_free(queue, wait=0.3), "and the lock died with it: nobody can ever read this queue"


def test_a_live_worker_reading_the_queue_shows_the_dead_one_was_only_waiting(monkeypatch):
    dead = FakeWorker(-9, Timer(-1), pid=1)
    holder, busy = FakeWorker(None, Timer(-1), pid=2), FakeWorker(None, Timer(900), pid=3)
    chans = {1: "", 2: "anon_pipe_read", 3: "pipe_read"}
    monkeypatch.setattr(skald_qcluster, "_wchan", chans.__getitem__)
    assert live_reader([dead, holder, busy], dead) == 2
    chans[2] = "futex_do_wait"  # everyone waits for the lock: nobody holds it but the dead
    assert live_reader([dead, holder, busy], dead) is None  # a busy worker's pipe is its own business
    chans[2] = ""  # the kernel hides wchan
    assert live_reader([dead, holder, busy], dead) is None


def _sentinel(pool: list[FakeWorker], queue: Any) -> SkaldSentinel:
    sentinel = SkaldSentinel.__new__(SkaldSentinel)  # no fork, no broker: the decision alone
    sentinel.pool, sentinel.task_queue = pool, queue
    sentinel.pusher = sentinel.monitor = None
    return sentinel


@pytest.mark.parametrize(("exitcode", "timer", "lock_held", "abandons"), [
    (-9, -1, True, True),  # idle, and the lock is gone: a fresh cluster
    (-9, -1, False, False),  # idle, but the lock is free (it was waiting for it): reincarnate
    (-9, 903, True, False),  # busy: reincarnate, whoever holds the lock
    (0, -2, True, False),  # recycled
])
def test_the_sentinel_abandons_the_cluster_only_when_an_idle_death_may_have_taken_the_lock(
        monkeypatch, exitcode, timer, lock_held, abandons):
    queue = Queue()
    if lock_held:
        queue._rlock.acquire()
    dead = FakeWorker(exitcode, Timer(timer), pid=os.getpid() + 10**6)
    sentinel = _sentinel([dead], queue)
    calls: list[str] = []
    monkeypatch.setattr(SkaldSentinel, "abandon", lambda self, p: calls.append("abandon"))
    monkeypatch.setattr(skald_qcluster.q_cluster.Sentinel, "reincarnate", lambda self, p: calls.append("reincarnate"))
    sentinel.reincarnate(dead)
    assert calls == (["abandon", "reincarnate"] if abandons else ["reincarnate"])  # abandon never returns


def test_abandoning_kills_the_rest_of_the_cluster_and_exits_75(monkeypatch):
    dead, peer = FakeWorker(-9, Timer(-1), pid=11), FakeWorker(None, Timer(900), pid=12)
    pusher = FakeWorker(None, Timer(-1), pid=13)
    sentinel = _sentinel([dead, peer], Queue())
    sentinel.pusher = pusher
    killed: list[tuple[int, int]] = []
    monkeypatch.setattr(skald_qcluster.os, "kill", lambda pid, sig: killed.append((pid, sig)))

    def exit_(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(skald_qcluster.os, "_exit", exit_)
    with pytest.raises(SystemExit) as exited:
        sentinel.abandon(dead)
    assert exited.value.code == QUEUE_LOST_EXIT == 75
    assert killed == [(12, signal.SIGKILL), (13, signal.SIGKILL)]
    assert peer.joined and pusher.joined and not dead.joined
