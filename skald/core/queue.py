"""Enqueue work on django-q2, only after the current transaction commits."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction


def enqueue_now(func: str, *args: Any, group: str = "skald") -> None:
    """Send ``func(*args)`` to a worker now (inline with ``SKALD_SYNC_TASKS``): for a sweep, which
    hands out work that is already durable."""
    if settings.SKALD_SYNC_TASKS:
        from django.utils.module_loading import import_string

        import_string(func)(*args)
        return
    from django_q.tasks import async_task

    async_task(func, *args, group=group)


def enqueue_on_commit(func: str, *args: Any, group: str = "skald") -> None:
    """Schedule ``func(*args)`` on a worker once the caller's transaction commits.

    With ``SKALD_SYNC_TASKS`` (tests) it runs inline at commit, through the same function.
    """

    transaction.on_commit(lambda: enqueue_now(func, *args, group=group))
