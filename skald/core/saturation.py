"""Backpressure's vocabulary: a saturated resource is a 503 with ``Retry-After``, never a 500.

A request that cannot get a database connection within ``SKALD_DB_POOL_TIMEOUT`` (psycopg's
``PoolTimeout``, which Django wraps in ``OperationalError``), or that finds the task queue full for
``SKALD_QUEUE_WAIT_SECONDS``, has waited a bounded time; it then answers ``503`` with a stable code
(``db_pool_exhausted``, ``queue_saturated``, ``server_busy``) and ``Retry-After``, and nothing of it
is stored. The API's exception handler, ``handler500`` and the ASGI admission gate
(:mod:`skald.backpressure`) all render it through :func:`saturation_of`.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from django import db
from django.conf import settings

from skald.core.errors import SkaldError

try:  # the pool is optional: SQLite and pgbouncer deployments run without psycopg_pool
    from psycopg_pool import PoolTimeout
except ImportError:  # pragma: no cover - a deployment without the pool extra
    PoolTimeout = None  # type: ignore[assignment,misc]

try:
    import psycopg
except ImportError:  # pragma: no cover - a SQLite-only deployment
    psycopg = None  # type: ignore[assignment]

# SQLSTATEs that mean "the database is not there for us right now", not "this request is wrong":
# class 08 (connection exception), and 57P01-57P03 (terminated by an administrator, crash shutdown,
# cannot connect now: a restart or failover).
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03")
# SQLite says so in words: the file cannot be opened (a missing volume, a full disk).
_SQLITE_UNAVAILABLE = ("unable to open database file", "disk i/o error")


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
    """The :class:`Saturated` an exception stands for, or ``None`` for any other failure.

    Besides a bounded wait running out, a database that is not there (a dropped or refused
    connection, a server shutting down or failing over) is ``503 database_unavailable`` with
    ``Retry-After``: clients that retry on 503 then retry, and nothing of the request was stored
    (its transaction, if any, did not commit)."""
    for link in _chain(exc):
        if isinstance(link, Saturated):
            return link
        if PoolTimeout is not None and isinstance(link, PoolTimeout):
            if _pool_could_not_grow():
                return _unavailable()
            return Saturated(f"No database connection could be had within {settings.SKALD_DB_POOL_TIMEOUT} s "
                             "(every pooled connection busy).", code="db_pool_exhausted")
        if _database_unavailable(link):
            return _unavailable()
    return None


def _unavailable() -> Saturated:
    return Saturated("The database is unavailable (the connection was lost or refused); nothing was stored. "
                     "Try again shortly.", code="database_unavailable")


def _pool_could_not_grow() -> bool:
    """A pool wait ran out although the pool had room for another connection: the database did not
    give one (it refuses connections, or is gone), as opposed to every pooled connection being busy."""
    pool = getattr(db.connections[db.DEFAULT_DB_ALIAS], "pool", None)
    if pool is None:
        return False
    try:
        return int(pool.get_stats().get("pool_size", 0)) < int(pool.max_size)
    except Exception:  # noqa: BLE001 - a classification aid only: fall back to "busy"
        return False


def _database_unavailable(link: BaseException) -> bool:
    if psycopg is not None and isinstance(link, psycopg.InterfaceError | psycopg.OperationalError):
        state = getattr(link, "sqlstate", None)
        # No SQLSTATE: the client failed to reach or keep the server (refused, closed, reset).
        return state is None or state.startswith(_UNAVAILABLE_STATES)
    if isinstance(link, sqlite3.OperationalError):
        return str(link).lower().startswith(_SQLITE_UNAVAILABLE)
    # Django's own, when it finds its connection gone ("connection already closed").
    return type(link) is db.InterfaceError


def busy_headers(busy: Saturated) -> dict[str, str]:
    return {"Retry-After": str(busy.retry_after)}


def busy_body(busy: Saturated) -> dict[str, Any]:
    return {"code": busy.code, "message": busy.message, "extra": busy.extra}
