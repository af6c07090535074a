"""Backpressure's vocabulary: a saturated resource is a 503 with ``Retry-After``, never a 500.

A request that cannot get a database connection within ``SKALD_DB_POOL_TIMEOUT`` (psycopg's
``PoolTimeout``, which Django wraps in ``OperationalError``), or that finds the task queue full for
``SKALD_QUEUE_WAIT_SECONDS``, has waited a bounded time; it then answers ``503`` with a stable code
(``db_pool_exhausted``, ``queue_saturated``, ``server_busy``) and ``Retry-After``, and nothing of it
is stored. The API's exception handler, ``handler500`` and the ASGI admission gate
(:mod:`skald.backpressure`) all render it through :func:`saturation_of`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

from skald.core.errors import SkaldError

try:  # the pool is optional: SQLite and pgbouncer deployments run without psycopg_pool
    from psycopg_pool import PoolTimeout
except ImportError:  # pragma: no cover - a deployment without the pool extra
    PoolTimeout = None  # type: ignore[assignment,misc]


class Saturated(SkaldError):
    """A bounded wait for a shared resource ran out: try again after ``retry_after`` seconds."""

    http_status = 503
    code = "server_busy"

    def __init__(self, message: str, *, code: str, retry_after: int | None = None) -> None:
        self.retry_after = retry_after if retry_after is not None else settings.SKALD_RETRY_AFTER_SECONDS
        super().__init__(message, code=code, retry_after=self.retry_after)


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 8:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def saturation_of(exc: BaseException) -> Saturated | None:
    """The :class:`Saturated` an exception stands for, or ``None`` for any other failure."""
    for link in _chain(exc):
        if isinstance(link, Saturated):
            return link
        if PoolTimeout is not None and isinstance(link, PoolTimeout):
            return Saturated(f"No database connection could be had within {settings.SKALD_DB_POOL_TIMEOUT} s "
                             "(every pooled connection busy, or the database unreachable).",
                             code="db_pool_exhausted")
    return None


def busy_headers(busy: Saturated) -> dict[str, str]:
    return {"Retry-After": str(busy.retry_after)}


def busy_body(busy: Saturated) -> dict[str, Any]:
    return {"code": busy.code, "message": busy.message, "extra": busy.extra}
