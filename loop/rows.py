"""The store's hot-path SQL, written by hand.

Every turn appends several narrative rows and moves tool calls through their states; building those
statements through the ORM cost more than running them. These helpers run inside the store's
transactions (``loop.store`` is their only caller) and speak both SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.backends.utils import CursorWrapper


def json_param() -> str:
    return "%s::jsonb" if connection.vendor == "postgresql" else "%s"


def load_json(value: Any) -> Any:
    """A JSON column as read by a raw cursor: text on SQLite (and Django's psycopg), else decoded."""
    return json.loads(value) if isinstance(value, str | bytes | bytearray) else value


def when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def next_seq(cursor: CursorWrapper, session_id: int) -> int | None:
    cursor.execute("UPDATE loop_session SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq", [session_id])
    row = cursor.fetchone()
    return int(row[0]) if row else None


def find_event(cursor: CursorWrapper, key: str) -> tuple[int, str, Any] | None:
    cursor.execute("SELECT seq, kind, payload FROM loop_sessionevent WHERE idempotency_key = %s", [key])
    row = cursor.fetchone()
    return (int(row[0]), row[1], load_json(row[2])) if row else None


def insert_event(
    cursor: CursorWrapper,
    *,
    session_id: int,
    seq: int,
    exchange_id: int | None,
    kind: str,
    narrative: str,
    body: str,
    key: str,
    created_at: datetime,
) -> bool:
    """Insert one row; False (and nothing written) when ``key`` is already stored."""
    cursor.execute(
        "INSERT INTO loop_sessionevent (session_id, seq, exchange_id, kind, narrative, payload, idempotency_key, "
        f"created_at) VALUES (%s, %s, %s, %s, %s, {json_param()}, %s, %s) "
        "ON CONFLICT (idempotency_key) DO NOTHING RETURNING id",
        [session_id, seq, exchange_id, kind, narrative, body, key, when(created_at)],
    )
    return cursor.fetchone() is not None


def append_event(
    cursor: CursorWrapper,
    *,
    session_id: int,
    exchange_id: int | None,
    kind: str,
    narrative: str,
    body: str,
    key: str,
    created_at: datetime,
) -> tuple[int | None, bool]:
    """Allocate the session's next seq and insert the row: ``(seq, inserted)``. ``seq`` is None
    when the session does not exist; ``inserted`` is False when ``key`` is stored already (the seq
    was allocated and must be given back). One round trip on PostgreSQL, two on SQLite."""
    if connection.vendor != "postgresql":
        seq = next_seq(cursor, session_id)
        if seq is None:
            return None, False
        return seq, insert_event(cursor, session_id=session_id, seq=seq, exchange_id=exchange_id, kind=kind,
                                 narrative=narrative, body=body, key=key, created_at=created_at)
    cursor.execute(
        "WITH allocated AS (UPDATE loop_session SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq), "
        "inserted AS (INSERT INTO loop_sessionevent (session_id, seq, exchange_id, kind, narrative, payload, "
        "idempotency_key, created_at) SELECT %s, last_seq, %s, %s, %s, %s::jsonb, %s, %s FROM allocated "
        "ON CONFLICT (idempotency_key) DO NOTHING RETURNING seq) "
        "SELECT (SELECT last_seq FROM allocated), (SELECT seq FROM inserted)",
        [session_id, session_id, exchange_id, kind, narrative, body, key, when(created_at)],
    )
    allocated, inserted = cursor.fetchone()
    return (int(allocated) if allocated is not None else None), inserted is not None


def give_back_seq(cursor: CursorWrapper, session_id: int) -> None:
    """Return a seq allocated in this transaction (the session row is still locked by it)."""
    cursor.execute("UPDATE loop_session SET last_seq = last_seq - 1 WHERE id = %s", [session_id])


def conversation_rows(
    cursor: CursorWrapper, *, session_id: int, narrative: str, kinds: Iterable[str], after_seq: int, limit: int
) -> list[tuple[int, str, Any]]:
    """The newest ``limit`` conversation rows after ``after_seq``, newest first."""
    kinds = list(kinds)
    marks = ", ".join(["%s"] * len(kinds))
    cursor.execute(
        f"SELECT seq, kind, payload FROM loop_sessionevent WHERE session_id = %s AND narrative = %s AND seq > %s "
        f"AND kind IN ({marks}) ORDER BY seq DESC LIMIT %s",
        [session_id, narrative, after_seq, *kinds, limit],
    )
    return [(int(seq), kind, load_json(payload)) for seq, kind, payload in cursor.fetchall()]


def exchange_events(cursor: CursorWrapper, exchange_id: int) -> list[tuple[int, str, Any]]:
    cursor.execute("SELECT seq, kind, payload FROM loop_sessionevent WHERE exchange_id = %s ORDER BY seq",
                   [exchange_id])
    return [(int(seq), kind, load_json(payload)) for seq, kind, payload in cursor.fetchall()]


def insert_tool_call(cursor: CursorWrapper, values: Sequence[Any]) -> int:
    """``values``: session, exchange, frame, turn, index, key, provider id, tool, arguments (JSON text),
    arguments hash, status, created/updated time."""
    cursor.execute(
        "INSERT INTO loop_toolcall (session_id, exchange_id, frame_id, turn, \"index\", call_key, provider_call_id, "
        f"tool, arguments, arguments_hash, status, result, is_error, created_at, updated_at) VALUES (%s, %s, %s, %s, "
        f"%s, %s, %s, %s, {json_param()}, %s, %s, '', %s, %s, %s) RETURNING id",
        [*values[:11], False, when(values[11]), when(values[11])],
    )
    return int(cursor.fetchone()[0])


def set_call_state(
    cursor: CursorWrapper, call_id: int, *, status: str, result: str, is_error: bool, now: datetime
) -> None:
    cursor.execute(
        "UPDATE loop_toolcall SET status = %s, result = %s, is_error = %s, updated_at = %s WHERE id = %s",
        [status, result, is_error, when(now), call_id],
    )


def count_turn(
    cursor: CursorWrapper, exchange_id: int, *, input_tokens: int, output_tokens: int, spent: int, incomplete: bool
) -> None:
    cursor.execute(
        "UPDATE loop_exchange SET turns = turns + 1, input_tokens = input_tokens + %s, "
        "output_tokens = output_tokens + %s, reserved_tokens = %s, accounting_incomplete = %s WHERE id = %s",
        [input_tokens, output_tokens, spent, incomplete, exchange_id],
    )
