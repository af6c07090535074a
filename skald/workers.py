"""Worker liveness is progress, not presence (issue 28).

A django-q2 worker SIGKILLed while it waits in ``task_queue.get()`` takes the queue's read lock
with it: every other worker of its cluster, and the one django-q2 forks to replace it, then waits
on that lock forever, while the cluster's stats still say "idle". Process checks cannot see this,
so each worker records in the database when it starts a task and until when it may be busy with
it (:class:`skald.models.WorkerBeat`), and :func:`workers_progress` calls the workers *wedged*
when work has been due for ``SKALD_WORKERS_STALL_SECONDS`` and no worker started a task in that
time nor is still busy with one. Readiness reports it; the launcher, systemd and Kubernetes
restart the cluster on it (docs/production.md, "Supervision").
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from loop.models import Work
from skald.core import clock
from skald.models import WorkerBeat

logger = logging.getLogger(__name__)

Progress = Literal["ok", "wedged"]
PRUNE_AFTER = timedelta(days=1)  # rows of workers gone (recycled, restarted) this long are dropped
WORKER_COMM = b"skald-qworker"  # /proc/<pid>/comm of a worker process: `ps -o pid,comm`, the tests
_UID = "skald.workers"


def worker_name() -> str:
    """This process as a beat names it: ``host:pid`` (unique across machines and pods)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@contextmanager
def _beat_transaction() -> Iterator[None]:
    # A beat lost with a server crash costs nothing (the next task writes another), so PostgreSQL
    # need not wait for the WAL flush (start + end of a task: 8.1 → 5.8 ms on a busy 2-core box).
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        yield


def worker_task_started(*, worker: str, timeout_seconds: float) -> None:
    """Record that ``worker`` started a task that may run ``timeout_seconds`` at most."""
    now = clock.now()
    busy_until = now + timedelta(seconds=timeout_seconds)
    with _beat_transaction():
        if WorkerBeat.objects.filter(worker=worker).update(started_at=now, busy_until=busy_until):
            return
        # A new worker process (first task, a recycled or restarted one): drop rows of long-gone ones.
        WorkerBeat.objects.filter(Q(busy_until__isnull=True) | Q(busy_until__lt=now),
                                  started_at__lt=now - PRUNE_AFTER).delete()
        WorkerBeat.objects.create(worker=worker, started_at=now, busy_until=busy_until)


def worker_task_ended(*, worker: str) -> None:
    with _beat_transaction():
        WorkerBeat.objects.filter(worker=worker).update(busy_until=None)


def workers_progress() -> Progress:
    """``wedged`` when work has been due longer than the bound and no worker started a task within
    it nor is still busy with one (a task killed while busy counts as busy until its timeout)."""
    now = clock.now()
    since = now - timedelta(seconds=settings.SKALD_WORKERS_STALL_SECONDS)
    if not Work.objects.filter(done_at__isnull=True, due_at__lt=since).exists():
        return "ok"
    moving = WorkerBeat.objects.filter(Q(started_at__gte=since) | Q(busy_until__gt=now))
    return "ok" if moving.exists() else "wedged"


# --- django-q2's worker signals (infrastructure liveness; no governance effect hangs on them) ---


def _on_spawn(**kwargs: Any) -> None:
    try:  # name the process so operators and the idle-kill tests tell workers from the sentinel
        ctypes.CDLL("libc.so.6").prctl(15, WORKER_COMM)  # PR_SET_NAME
    except OSError:  # not Linux
        pass


def _on_task_start(task: dict[str, Any], **kwargs: Any) -> None:
    if task.get("sync"):  # run inline, not by a worker
        return
    try:
        # django-q2 has popped the task's own timeout by now; Skald's tasks all run under this one.
        worker_task_started(worker=worker_name(), timeout_seconds=settings.SKALD_TASK_TIMEOUT)
    except Exception:  # a beat never fails the task; readiness may then say wedged a little early
        logger.exception("recording a worker's task start failed")


def _on_task_end(task: dict[str, Any], **kwargs: Any) -> None:
    if task.get("sync"):
        return
    try:
        worker_task_ended(worker=worker_name())
    except Exception:
        logger.exception("recording a worker's task end failed")


def connect() -> None:
    """Connect the worker receivers (idempotent: each has a dispatch uid)."""
    from django_q.signals import post_execute_in_worker, post_spawn, pre_execute

    post_spawn.connect(_on_spawn, dispatch_uid=f"{_UID}.spawn")
    pre_execute.connect(_on_task_start, dispatch_uid=f"{_UID}.start")
    post_execute_in_worker.connect(_on_task_end, dispatch_uid=f"{_UID}.end")
