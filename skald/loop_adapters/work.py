"""Work that must happen, recorded with its need (the kernel's outbox, SPEC R2).

:func:`work_on_commit` writes an outbox row in the caller's transaction and enqueues it on
django-q2 once that commits; the queue only makes it happen sooner. :func:`work_run` carries a row
out and marks it done; a row whose worker died (or that never reached the queue) falls due again
after one lease and the sweep hands it out again (``skald.tasks.sweep``).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from loop.recovery import ResolverBusy
from skald.core.queue import enqueue_on_commit
from skald.loop_adapters.store import kernel_store

logger = logging.getLogger(__name__)


def work_on_commit(task: str, *args: Any, key: str) -> None:
    """Record that ``task(*args)`` must happen (inside the caller's transaction) and enqueue it on
    commit. ``key`` names the need: recording the same need twice is one row."""
    work = kernel_store().work.add(key=key, task=task, args=args)
    enqueue_on_commit("skald.tasks.run_work", work.pk)


def work_run(work_id: int) -> str:
    """Carry out one outbox row unless it is done or another worker holds it (for one lease)."""
    store = kernel_store()
    work = store.work.take(work_id, lease_seconds=settings.SKALD_LEASE_SECONDS)
    if work is None:
        return "not due"
    try:
        result = import_string(work.task)(*work.args)
    except ResolverBusy:
        return "busy: due again after the lease"  # another answer of the batch runs; this one later
    except Exception:
        # The failure is durable where it happened (a broken exchange, an audit row); a blind
        # repeat would not mend it.
        logger.exception("work %s (%s) failed", work.key, work.task)
        store.work.done(work.key)
        raise
    store.work.done(work.key)
    return str(result)


def work_due(limit: int = 100) -> list[int]:
    return kernel_store().work.due(limit=limit)
