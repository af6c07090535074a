"""Enqueue work on django-q2, only after the current transaction commits; refuse new work with a
503 while the queue is saturated (backpressure, issue 18)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction

from skald.core.saturation import Saturated

QUEUE_POLL_SECONDS = 0.1
sleep: Callable[[float], None] = time.sleep  # injectable
QUEUE_ROOM_TTL = 0.5
_broker: Any = None
_room_seen_at = -1e9


def enqueue_now(func: str, *args: Any, group: str = "skald") -> None:
    """Send ``func(*args)`` to a worker now (inline with ``SKALD_SYNC_TASKS``): for a sweep, which
    hands out work that is already durable."""
    if settings.SKALD_SYNC_TASKS:
        from django.utils.module_loading import import_string

        import_string(func)(*args)
        return
    from django_q.tasks import async_task

    # The process's broker: django-q2 would otherwise build one (a new Redis connection) per task.
    async_task(func, *args, group=group, broker=_process_broker())


def enqueue_on_commit(func: str, *args: Any, group: str = "skald") -> None:
    """Schedule ``func(*args)`` on a worker once the caller's transaction commits.

    With ``SKALD_SYNC_TASKS`` (tests) it runs inline at commit, through the same function.
    """

    transaction.on_commit(lambda: enqueue_now(func, *args, group=group))


def _process_broker() -> Any:
    global _broker
    if _broker is None:  # one broker (and its Redis connection pool) per process
        from django_q.brokers import get_broker

        _broker = get_broker()
    return _broker


def _room_seen_recently() -> bool:
    # One queue-length read per QUEUE_ROOM_TTL per process is plenty: the limit is a ceiling on a
    # backlog, not an exact count, and the read is a broker round trip on the request path.
    return time.monotonic() - _room_seen_at < QUEUE_ROOM_TTL


def queue_wait_for_room() -> None:
    """Before admitting work: wait up to ``SKALD_QUEUE_WAIT_SECONDS`` while
    ``SKALD_QUEUE_MAX_PENDING`` tasks or more wait for a worker, then refuse with
    ``503 queue_saturated``. An unreachable broker refuses at once (``broker_unavailable``)."""
    global _room_seen_at
    limit = settings.SKALD_QUEUE_MAX_PENDING
    if not limit or settings.SKALD_SYNC_TASKS or _room_seen_recently():
        return
    deadline = time.monotonic() + settings.SKALD_QUEUE_WAIT_SECONDS
    while True:
        try:
            pending = int(_process_broker().queue_size() or 0)
        except Exception as exc:  # any broker failure means the broker is unavailable
            raise Saturated(f"The task broker is unreachable ({type(exc).__name__}).",
                            code="broker_unavailable") from exc
        if pending < limit:
            if pending < limit // 2:
                _room_seen_at = time.monotonic()
            return
        if time.monotonic() >= deadline:
            raise Saturated(f"{pending} tasks already wait for a worker (limit {limit}).", code="queue_saturated")
        sleep(QUEUE_POLL_SECONDS)
