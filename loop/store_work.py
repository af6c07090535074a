"""The store's outbox: work recorded with the need, handed out until it is done (SPEC R2)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from loop import sql
from loop.journal import Journal
from loop.models import Work
from loop.sql import work as rows


class WorkLog:
    """Pending work rows. ``add`` runs inside the transaction that creates the need."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def add(self, *, key: str, task: str, args: Sequence[Any]) -> Work:
        """Record that ``task(*args)`` must happen; ``key`` makes a repeat of the same need one row."""
        assert sql.in_transaction(), "work is recorded in the transaction that creates the need"
        return rows.add(key=key, task=task, args=args, now=self.journal.now())

    def take(self, work_id: int, *, lease_seconds: float) -> Work | None:
        """Take a due row for ``lease_seconds``; None when it is done or someone else holds it."""
        return rows.take(work_id, now=self.journal.now(), lease=timedelta(seconds=lease_seconds))

    def done(self, key: str) -> bool:
        return rows.done(key, self.journal.now())

    def due(self, *, limit: int = 100) -> list[int]:
        return rows.due(self.journal.now(), limit)
