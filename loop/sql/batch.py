"""A store transaction's deferred writes, sent together just before it commits (see
:meth:`loop.journal.Journal.batch`): narrative rows as one multi-row INSERT, the sessions' counters
and the row updates whose results nobody reads. On PostgreSQL all of it is one statement (data-
modifying CTEs); on SQLite, where a statement costs no round trip, one statement per part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from django.db import connection

from loop.sql import Cursor, json_param, when
from loop.sql.events import EventRow


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
            f"idempotency_key, created_at) VALUES {values} ON CONFLICT (idempotency_key) DO NOTHING RETURNING seq",
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
          writes: Sequence[Write]) -> int:
    """Insert ``rows`` (seqs allocated under the session locks), set each session's counters
    (``last_seq``, ``exchange_count``) and run ``writes``; returns how many rows were inserted (a
    row whose idempotency key is stored already is not)."""
    updates = [*_session_updates(sessions), *((write.sql, list(write.params)) for write in writes)]
    if connection.vendor == "postgresql":
        parts = [f"w{index} AS ({statement})" for index, (statement, _params) in enumerate(updates)]
        params = [value for _statement, values in updates for value in values]
        if rows:
            insert, insert_params = _insert(rows)
            parts.append(f"inserted AS ({insert})")
            params += insert_params
            tail = "SELECT count(*) FROM inserted"
        elif len(updates) == 1:
            cursor.execute(*updates[0])
            return 0
        else:
            tail = "SELECT 0"
        if parts:
            cursor.execute(f"WITH {', '.join(parts)} {tail}", params)
            return int(cursor.fetchone()[0])
        return 0
    inserted = 0
    if rows:
        cursor.execute(*_insert(rows))
        inserted = len(cursor.fetchall())
    for statement, values in updates:
        cursor.execute(statement, values)
    return inserted
