"""A notification's first attempt, made at once by the process that recorded it.

The outbox row is the truth (written with the event it announces), and a queued task carries it out
on a worker. Under load that task waits behind agent turns in the same queue, so an approver would
hear of a parked call seconds late. The process that committed the event therefore also makes the
first attempt itself, on a small thread pool, right after the commit. Whoever claims the row first
sends it (:func:`skald.notifications.send.claim` is a compare-and-set); the other finds it "not due".
If this process dies before or during the send, the queued task or the sweep sends it after the
claim's lease: the fast path adds speed, never a second message or a lost one.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.db import connections

from skald.notifications.send import delivery_send

logger = logging.getLogger(__name__)
THREADS = 2

_pool: ThreadPoolExecutor | None = None
_pool_pid = 0


def send_soon(delivery_id: int) -> None:
    """Attempt ``delivery_id`` now, off the caller's thread (call it once the row has committed)."""
    if settings.SKALD_SYNC_TASKS or not settings.SKALD_NOTIFY_SEND_AT_COMMIT:  # inline already, or switched off
        return
    _executor().submit(_send, delivery_id)


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked worker starts a pool of its own
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="notify-send")
        _pool_pid = os.getpid()
    return _pool


def _send(delivery_id: int) -> None:
    try:
        delivery_send(delivery_id)
    except Exception:  # the queued task and the sweep retry it; this thread must live on
        logger.exception("the first attempt of notification delivery %s failed", delivery_id)
    finally:
        connections.close_all()  # this thread's own connections (returned to the pool where there is one)
