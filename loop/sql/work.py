"""The outbox (``loop_work``): pending work rows, handed out again while not done."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F

from loop.models import Work


def add(*, key: str, task: str, args: Sequence[Any], now: datetime) -> Work:
    """The row for ``key`` (an existing one when the need was recorded already)."""
    work, _created = Work.objects.get_or_create(key=key, defaults={"task": task, "args": list(args),
                                                                   "created_at": now, "due_at": now})
    return work


def take(work_id: int, *, now: datetime, lease: timedelta) -> Work | None:
    """Hand a due, undone row to one taker for ``lease``; None when it is done or taken."""
    taken = Work.objects.filter(pk=work_id, done_at__isnull=True, due_at__lte=now).update(
        due_at=now + lease, attempts=F("attempts") + 1)
    return Work.objects.get(pk=work_id) if taken else None


def done(key: str, now: datetime) -> bool:
    return Work.objects.filter(key=key, done_at__isnull=True).update(done_at=now) == 1


def due(now: datetime, limit: int) -> list[int]:
    return list(Work.objects.filter(done_at__isnull=True, due_at__lte=now).order_by("due_at")
                .values_list("pk", flat=True)[:limit])
