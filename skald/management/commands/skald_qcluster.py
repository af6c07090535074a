"""`manage.py skald_qcluster`: django-q2's ``qcluster`` that restarts whole, at once, when a worker
dies idle (issue 28 §1). `make run` and the production units run this one.

Two idle django-q2 workers wait in ``task_queue.get()``: one *holds* the queue's read lock while
it reads the pipe, the others wait for that lock. A worker SIGKILLed while holding it (the OOM
killer, an operator) takes the lock with it, and django-q2's Sentinel reincarnates it into the
same queue: every worker of the cluster then waits forever. Repair cannot wait for that to show
(``workers: wedged`` on ``/readyz`` after ``SKALD_WORKERS_STALL_SECONDS``; the backstop), so the
Sentinel here acts as soon as its guard loop sees the death: a worker killed by a signal whose
timer said *idle* (django-q2 sets ``-1`` while a worker waits for a task, the task's timeout while
it runs one) may have held the lock. Unless the kernel shows a live worker still reading the
queue's pipe (so the dead one was only waiting for the lock) or the Sentinel can take the lock
itself (nobody holds it: the other workers are busy), the Sentinel SIGKILLs its workers,
pusher and monitor and exits ``QUEUE_LOST_EXIT``; this command's process exits with the same
status, and the supervisor (the launcher, systemd ``Restart=always``, Kubernetes) starts a fresh
cluster at once. A worker killed *busy* (mid-task, django-q2's own timeout kill among them) held
no queue lock: django-q2 reincarnates it as always and the kernel recovers the interrupted turn.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django_q import cluster as q_cluster
from django_q.conf import logger
from django_q.management.commands.qcluster import Command as QClusterCommand

from skald.core.queue import enqueue_now
from skald.launcher import QUEUE_LOST_EXIT

IDLE = -1  # django-q2's worker timer while it waits for a task (worker.py)
ABANDON_JOIN_SECONDS = 2.0
LOCK_PROBE_SECONDS = 0.1


def _wchan(pid: int) -> str:
    """Where the kernel has ``pid`` waiting (``pipe_read``…, ``futex_…``); ``""`` when it hides it."""
    try:
        found = Path(f"/proc/{pid}/wchan").read_text().strip()
    except OSError:
        return ""
    return "" if found in {"0", "?"} else found


def died_idle(process: Any) -> bool:
    """A worker killed by a signal while its timer said it waited for a task (not ran one)."""
    exitcode = process.exitcode
    return exitcode is not None and exitcode < 0 and process.timer.value == IDLE


def live_reader(pool: list[Any], dead: Any) -> int | None:
    """The pid of a live idle worker the kernel shows reading a pipe: the task queue's lock holder
    (only the holder reads), so the dead worker was merely waiting for the lock. None when no
    worker reads or the kernel does not say (``/proc/<pid>/wchan`` hidden)."""
    for process in pool:
        if process is dead or process.exitcode is not None or process.timer.value != IDLE:
            continue
        if "pipe" in _wchan(process.pid):
            return int(process.pid)
    return None


def lock_free(queue: Any, wait: float = LOCK_PROBE_SECONDS) -> bool:
    """Whether the queue's read lock can be taken (then it is released at once): nobody holds it,
    so the dead worker did not take it with it."""
    if not queue._rlock.acquire(timeout=wait):
        return False
    queue._rlock.release()
    return True


class SkaldSentinel(q_cluster.Sentinel):
    def reincarnate(self, process: Any) -> None:
        if process in self.pool and died_idle(process) and self.queue_lost(process):
            self.abandon(process)
        super().reincarnate(process)

    def queue_lost(self, dead: Any) -> bool:
        """Whether the task queue's read lock may have died with ``dead``: no live worker reads the
        queue (the holder would) and the lock cannot be taken."""
        return live_reader(self.pool, dead) is None and not lock_free(self.task_queue)

    def abandon(self, dead: Any) -> None:
        """SIGKILL this cluster's processes and exit ``QUEUE_LOST_EXIT``: its task queue may be
        locked for good. Tasks in flight are lost with it; the kernel's recovery takes their turns."""
        logger.critical("worker %s (pid %s) died idle by signal %s and may hold the task queue's read lock; "
                        "restarting the cluster", dead.name, dead.pid, -dead.exitcode)
        others = [p for p in (*self.pool, self.pusher, self.monitor) if p is not None and p is not dead]
        for process in others:
            if process.pid and process.exitcode is None:
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + ABANDON_JOIN_SECONDS
        for process in others:
            process.join(timeout=max(0.0, deadline - time.monotonic()))
        os._exit(QUEUE_LOST_EXIT)  # no clean-up: the queues' feeder threads would block on the lost lock


class SkaldCluster(q_cluster.Cluster):
    def start(self) -> int:
        # django-q2's Cluster.start() forks `Sentinel` by its module-level name.
        original = q_cluster.Sentinel
        q_cluster.Sentinel = SkaldSentinel  # type: ignore[misc]
        try:
            return int(super().start())
        finally:
            q_cluster.Sentinel = original  # type: ignore[misc]


class Command(QClusterCommand):
    help = "Starts a django-q2 cluster that exits 75 (for its supervisor to restart it) when a worker dies idle."

    def handle(self, *args: Any, **options: Any) -> None:
        settings.SECRET_KEY  # noqa: B018 - as qcluster: no cluster without the signing key
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        cluster = SkaldCluster()
        cluster.start()
        if options.get("run_once", False):
            cluster.stop()
            return
        sentinel = cluster.sentinel
        assert sentinel is not None
        if sentinel.is_alive():
            # A sweep at once: tasks a cluster before this one took to its grave (SIGKILLed with its
            # queue) are handed out again now rather than at the sweeper's next turn.
            try:
                enqueue_now("skald.tasks.sweep")
            except Exception:  # noqa: BLE001 - the sweeper and the minute schedule hand them out all the same
                logger.exception("enqueueing a start-up sweep failed")
        while sentinel.is_alive():  # SIGTERM/SIGINT: django-q2's handler stops the sentinel in order
            time.sleep(0.1)
        if sentinel.exitcode == QUEUE_LOST_EXIT:
            sys.exit(QUEUE_LOST_EXIT)
        if sentinel.exitcode:  # the sentinel itself died: say so to the supervisor, not "stopped"
            logger.critical("the cluster's sentinel exited with %s", sentinel.exitcode)
            sys.exit(1)
