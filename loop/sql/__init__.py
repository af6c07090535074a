"""Every query of the kernel's store, in one package (nothing else in ``loop`` queries the database).

The hot path is hand-written SQL (building those statements through the ORM cost more than
running them); the rest uses the ORM. The functions run inside the store's transactions and speak
both SQLite and PostgreSQL. ``loop.store`` and its collaborators are their only callers.

The hand-written statements go to the driver's own cursor (:class:`DriverCursor`) on Django's
connection, in Django's transaction, with Django's exceptions: Django's cursor wrapper costs more
than the statement itself on SQLite (it rewrites the placeholders with a regular expression on
every call) and about a third of a statement's CPU on PostgreSQL. While Django records queries
(``DEBUG``, ``CaptureQueriesContext``) or an execute wrapper is installed
(``connection.execute_wrapper``) they go through Django's cursor instead, so Django sees them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from types import TracebackType
from typing import Any, Protocol

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.asyncio import async_unsafe


class Cursor(Protocol):
    """What the statements in :mod:`loop.sql` use of a cursor (DB-API, ``%s`` placeholders)."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __enter__(self) -> Cursor: ...

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None: ...


def json_param() -> str:
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def load_json(value: Any) -> Any:
    """A JSON column as read by a raw cursor: text on SQLite (and Django's psycopg), else decoded."""
    return json.loads(value) if isinstance(value, str | bytes | bytearray) else value


def when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def for_update() -> str:
    """Row locks exist on PostgreSQL; SQLite serialises writers anyway."""
    return " FOR UPDATE" if connection.vendor == "postgresql" else ""


def in_transaction() -> bool:
    return connection.in_atomic_block


@lru_cache(maxsize=512)
def _qmark(sql: str) -> str:
    """``%s`` placeholders as sqlite3's ``?``: Django's SQLite conversion (``convert_query``), done
    once per distinct statement instead of on every call."""
    # Imported here: Django's SQLite backend costs a PostgreSQL process about 10 ms to load.
    from django.db.backends.sqlite3.base import FORMAT_QMARK_REGEX

    return FORMAT_QMARK_REGEX.sub("?", sql).replace("%%", "%")


def _django_must_see(db: BaseDatabaseWrapper) -> bool:
    """Django records queries (``DEBUG``, ``CaptureQueriesContext``) or runs an execute wrapper:
    the statements must then go through Django's cursor, one by one."""
    return bool(db.queries_logged or db.execute_wrappers)


class DriverCursor:
    """The driver's cursor on Django's connection: the same transaction, placeholders and
    exceptions as Django's cursor (a driver error is raised as Django's), without its per-call cost."""

    __slots__ = ("_cursor", "_db", "_qmark")

    def __init__(self, db: BaseDatabaseWrapper, driver_cursor: Any, *, qmark: bool) -> None:
        self._db = db
        self._cursor = driver_cursor
        self._qmark = qmark

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._db.validate_no_broken_transaction()
        with self._db.wrap_database_errors:
            self._cursor.execute(_qmark(sql) if self._qmark else sql, params)

    def fetchone(self) -> Any:
        with self._db.wrap_database_errors:
            return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        with self._db.wrap_database_errors:
            rows: list[Any] = self._cursor.fetchall()
        return rows

    def __enter__(self) -> DriverCursor:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._cursor.close()


@async_unsafe
def cursor() -> Cursor:
    """A cursor for a batch of the hand-written statements, inside the caller's transaction."""
    db = connections[DEFAULT_DB_ALIAS]
    if _django_must_see(db):
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    with db.wrap_database_errors:
        if db.vendor == "sqlite":  # Django's SQLite cursor class is the per-call cost
            return DriverCursor(db, db.connection.cursor(), qmark=True)
        return DriverCursor(db, db.create_cursor(), qmark=False)


@contextmanager
def sent_with_commit() -> Iterator[None]:
    """What the block executes is sent together with the transaction's COMMIT, when that is one
    round trip: on PostgreSQL, in the outermost transaction (psycopg's pipeline mode: the block's
    statements, then COMMIT, then one sync). Django's commit at the end of the atomic block then
    finds nothing to commit and runs its on-commit hooks as usual. A statement that fails there
    fails the block (the COMMIT is skipped and the atomic block rolls back), and nothing in the
    block may read a result. Anywhere else (SQLite, a savepoint, Django recording queries) the
    block runs as it is and Django commits later.

    Besides the round trip, a lock the block takes (the audit chain's) is held until the COMMIT
    that follows it on the server, not for a round trip to this process and back."""
    db = connections[DEFAULT_DB_ALIAS]
    if (db.vendor != "postgresql" or _django_must_see(db) or db.savepoint_ids or len(db.atomic_blocks) != 1
            or db.needs_rollback):
        yield
        return
    with db.wrap_database_errors, db.connection.pipeline():
        yield
        db.connection.execute("COMMIT", prepare=False)


def release_thread() -> None:
    """Close this thread's database connections (a helper thread that is about to end)."""
    connections.close_all()
