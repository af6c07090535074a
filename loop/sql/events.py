"""Narrative rows (``loop_sessionevent``) and the per-session sequence (``loop_session.last_seq``)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection

from loop.models import Session, SessionEvent
from loop.sql import Cursor, for_update, json_param, load_json, when


def next_seq(cursor: Cursor, session_id: int) -> int | None:
    cursor.execute("UPDATE loop_session SET last_seq = last_seq + 1 WHERE id = %s RETURNING last_seq", [session_id])
    row = cursor.fetchone()
    return int(row[0]) if row else None


def find_event(cursor: Cursor, key: str) -> tuple[int, str, Any] | None:
    cursor.execute("SELECT seq, kind, payload FROM loop_sessionevent WHERE idempotency_key = %s", [key])
    row = cursor.fetchone()
    return (int(row[0]), row[1], load_json(row[2])) if row else None


def insert_event(
    cursor: Cursor,
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
    cursor: Cursor,
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


class EventRow(NamedTuple):
    """A narrative row to insert, its seq already allocated."""

    session_id: int
    seq: int
    exchange_id: int | None
    kind: str
    narrative: str
    body: str
    key: str
    created_at: datetime


def lock_last_seq(cursor: Cursor, session_id: int) -> int | None:
    """The session's ``last_seq``, its row locked until the transaction ends (None: no session)."""
    cursor.execute(f"SELECT last_seq FROM loop_session WHERE id = %s{for_update()}", [session_id])
    row = cursor.fetchone()
    return int(row[0]) if row else None


def lock_last_seq_and_claim(cursor: Cursor, session_id: int, exchange_id: int) -> tuple[int, str] | None:
    """:func:`lock_last_seq` and the exchange's claim token in one round trip (None: no session).

    On PostgreSQL the session row is locked before the exchange row, as every writer orders them
    (the other order deadlocks), and ``FOR UPDATE`` reads the exchange's newest committed claim
    even when the statement waited for the session lock. A missing exchange reads as claim ``""``.
    """
    if connection.vendor == "postgresql":
        cursor.execute(
            "SELECT s.last_seq, (SELECT claim_token FROM loop_exchange WHERE id = %s FOR UPDATE) "
            "FROM (SELECT last_seq FROM loop_session WHERE id = %s FOR UPDATE) s", [exchange_id, session_id])
    else:
        cursor.execute("SELECT last_seq, (SELECT claim_token FROM loop_exchange WHERE id = %s) FROM loop_session "
                       "WHERE id = %s", [exchange_id, session_id])
    row = cursor.fetchone()
    return (int(row[0]), row[1] or "") if row else None


def give_back_seq(cursor: Cursor, session_id: int) -> None:
    """Return a seq allocated in this transaction (the session row is still locked by it)."""
    cursor.execute("UPDATE loop_session SET last_seq = last_seq - 1 WHERE id = %s", [session_id])


def conversation_rows(
    cursor: Cursor, *, session_id: int, narrative: str, kinds: Iterable[str], after_seq: int, limit: int
) -> tuple[list[tuple[int, str, Any]], Any]:
    """The newest ``limit`` conversation rows after ``after_seq``, newest first, and the session
    row's ``created_at`` (None: no such session), in one statement."""
    kinds = list(kinds)
    marks = ", ".join(["%s"] * len(kinds))
    cursor.execute(
        "SELECT seq, kind, payload, NULL FROM (SELECT seq, kind, payload FROM loop_sessionevent WHERE session_id = %s "
        f"AND narrative = %s AND seq > %s AND kind IN ({marks}) ORDER BY seq DESC LIMIT %s) newest "
        "UNION ALL SELECT NULL, NULL, NULL, created_at FROM loop_session WHERE id = %s",
        [session_id, narrative, after_seq, *kinds, limit, session_id],
    )
    rows, stamp = [], None
    for seq, kind, payload, created_at in cursor.fetchall():
        if seq is None:
            stamp = created_at
        else:
            rows.append((int(seq), kind, load_json(payload)))
    rows.sort(key=lambda row: row[0], reverse=True)  # a UNION promises no order
    return rows, stamp


def latest_compaction(cursor: Cursor, *, session_id: int, narrative: str) -> tuple[int, Any] | None:
    """The seq and payload of the narrative's latest compaction row, if any."""
    cursor.execute(
        "SELECT seq, payload FROM loop_sessionevent WHERE session_id = %s AND narrative = %s AND kind = %s "
        "ORDER BY seq DESC LIMIT 1", [session_id, narrative, "compaction"],
    )
    row = cursor.fetchone()
    return (int(row[0]), load_json(row[1])) if row else None


def compaction_probes(cursor: Cursor, *, session_id: int, narrative: str) -> list[Any]:
    """The payloads of a session's probe reports in one narrative (its episode), oldest first."""
    cursor.execute(
        "SELECT payload FROM loop_sessionevent WHERE session_id = %s AND narrative = %s AND kind = %s ORDER BY seq",
        [session_id, narrative, "control:compaction_probe"],
    )
    return [load_json(payload) for (payload,) in cursor.fetchall()]


def frame_turns(cursor: Cursor, *, exchange_id: int, narrative: str) -> int:
    """How many model turns (assistant rows) one narrative has had in an exchange."""
    cursor.execute("SELECT COUNT(*) FROM loop_sessionevent WHERE exchange_id = %s AND narrative = %s AND kind = %s",
                   [exchange_id, narrative, "assistant"])
    return int(cursor.fetchone()[0])


def exchange_events(cursor: Cursor, exchange_id: int) -> list[tuple[int, str, Any]]:
    cursor.execute("SELECT seq, kind, payload FROM loop_sessionevent WHERE exchange_id = %s ORDER BY seq",
                   [exchange_id])
    return [(int(seq), kind, load_json(payload)) for seq, kind, payload in cursor.fetchall()]


def event_at(session_id: int, seq: int) -> SessionEvent:
    return SessionEvent.objects.get(session_id=session_id, seq=seq)


def session_counters(session_id: int) -> tuple[int, int] | None:
    """``(last_seq, exchange_count)`` of a session, or None when it does not exist."""
    return Session.objects.filter(pk=session_id).values_list("last_seq", "exchange_count").first()


def session_rows(session_id: int) -> list[tuple[int, str, Any, int | None, str]]:
    """Every narrative row of a session: ``(seq, kind, payload, exchange_id, narrative)`` in seq order."""
    return list(SessionEvent.objects.filter(session_id=session_id).order_by("seq")
                .values_list("seq", "kind", "payload", "exchange_id", "narrative"))


PROVENANCE_KINDS = ("tool_result", "subagent_result", "compaction", "control:provenance", "control:injection_suspect",
                    "control:frame_opened")


def provenance_rows(cursor: Cursor, session_id: int) -> list[tuple[int, str, Any, str]]:
    """The rows provenance is computed from (loop/provenance.py): ``(seq, kind, payload, narrative)``."""
    marks = ", ".join(["%s"] * len(PROVENANCE_KINDS))
    cursor.execute(f"SELECT seq, kind, payload, narrative FROM loop_sessionevent WHERE session_id = %s "
                   f"AND kind IN ({marks}) ORDER BY seq", [session_id, *PROVENANCE_KINDS])
    return [(int(seq), kind, load_json(payload), narrative) for seq, kind, payload, narrative in cursor.fetchall()]
