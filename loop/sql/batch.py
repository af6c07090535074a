"""A store transaction's deferred writes, sent together just before it commits (see
:meth:`loop.journal.Journal.batch`): narrative rows as one multi-row INSERT, the sessions' counters
and the row updates whose results nobody reads. On PostgreSQL all of it is one statement (data-
modifying CTEs), which can travel with the transaction's COMMIT (:func:`loop.sql.sent_with_commit`);
on SQLite, where a statement costs no round trip, one statement per part.

Nothing here reads a result back: a row whose idempotency key is stored already fails the
statement on the key's unique constraint (:func:`repeats_a_key` recognises it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from django.db import IntegrityError, connection

from loop.models import SessionEvent
from loop.sql import Cursor, json_param, when
from loop.sql.events import EventRow

# The name of SessionEvent's unique constraint on its idempotency key, as the model declares it.
KEY_CONSTRAINT = next(constraint.name for constraint in SessionEvent._meta.constraints
                      if list(getattr(constraint, "fields", ())) == ["idempotency_key"])


class Write(NamedTuple):
    """One statement whose result nobody reads: an UPDATE of one row, or the audit rows' INSERT."""

    row: tuple[str, int]  # (what, id): a statement changes a row at most once
    sql: str
    params: Sequence[Any]
    supersedes: bool = False  # it sets the whole state, so it replaces an earlier write of ``row``


def execute(cursor: Cursor, write: Write) -> None:
    cursor.execute(write.sql, list(write.params))


def _insert(rows: Sequence[EventRow]) -> tuple[str, list[Any]]:
    values = ", ".join([f"(%s, %s, %s, %s, %s, {json_param()}, %s, %s)"] * len(rows))
    params: list[Any] = []
    for row in rows:
        params += [row.session_id, row.seq, row.exchange_id, row.kind, row.narrative, row.body, row.key,
                   when(row.created_at)]
    return ("INSERT INTO loop_sessionevent (session_id, seq, exchange_id, kind, narrative, payload, "
            f"idempotency_key, created_at) VALUES {values}",
            params)


def _session_updates(sessions: Mapping[int, Mapping[str, int]]) -> list[tuple[str, list[Any]]]:
    updates = []
    for session_id, columns in sorted(sessions.items()):
        if columns:
            names = sorted(columns)
            updates.append((f"UPDATE loop_session SET {', '.join(f'{name} = %s' for name in names)} WHERE id = %s",
                            [*(columns[name] for name in names), session_id]))
    return updates


def flush(cursor: Cursor, rows: Sequence[EventRow], sessions: Mapping[int, Mapping[str, int]],
          writes: Sequence[Write]) -> None:
    """Insert ``rows`` (seqs allocated under the session locks), set each session's counters
    (``last_seq``, ``exchange_count``) and run ``writes``. A row whose idempotency key is stored
    already fails the statement (:func:`repeats_a_key`)."""
    updates = [*_session_updates(sessions), *((write.sql, list(write.params)) for write in writes)]
    statements = ([_insert(rows)] if rows else []) + updates
    if connection.vendor == "postgresql" and len(statements) > 1:
        (main, main_params), *rest = statements
        parts = [f"w{index} AS ({statement})" for index, (statement, _params) in enumerate(rest)]
        cursor.execute(f"WITH {', '.join(parts)} {main}",
                       [value for _statement, values in rest for value in values] + list(main_params))
        return
    for statement, values in statements:
        cursor.execute(statement, values)


def repeats_a_key(error: IntegrityError) -> bool:
    """Whether ``error`` is a narrative row repeating a stored idempotency key."""
    cause = error.__cause__
    constraint = getattr(getattr(cause, "diag", None), "constraint_name", None)  # psycopg
    return constraint == KEY_CONSTRAINT or f"{SessionEvent._meta.db_table}.idempotency_key" in str(cause)
