"""Chains built fast (rows hashed here, not through the service) and an attacker's raw SQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from audit import chain
from audit.kinds import AuditKind

T0 = datetime(2026, 3, 1, 9, 30, 0, 123456, tzinfo=UTC)
KINDS = [AuditKind.CASE_CREATED, AuditKind.RUN_LAUNCHED, AuditKind.APPROVAL_RESOLVED, AuditKind.TURN_ENDED]
ACTORS = [("user", "1"), ("system", "kernel"), ("agent", "troubleshooter")]


def row_fields(seq: int, prev_hash: str) -> dict[str, Any]:
    """A plausible, varied row (unicode, floats, nesting) for position ``seq``, hash included."""
    actor_type, actor_id = ACTORS[seq % len(ACTORS)]
    fields: dict[str, Any] = {
        "seq": seq,
        "time": T0 + timedelta(milliseconds=37 * seq, microseconds=seq),
        "actor_type": actor_type,
        "actor_id": actor_id,
        "kind": int(KINDS[seq % len(KINDS)]),
        "subject_type": "skald.run",
        "subject_id": str(seq // 3),
        "payload": chain.canonical_json(
            {"n": seq, "note": "Grüße ✓ 日本", "ratio": seq / 7, "tags": ["a", {"b": None}]}
        ),
        "prev_hash": prev_hash,
    }
    fields["hash"] = chain.row_hash(**fields)
    return fields


def chain_rows(n: int) -> list[dict[str, Any]]:
    rows, prev = [], chain.GENESIS
    for seq in range(1, n + 1):
        rows.append(row_fields(seq, prev))
        prev = rows[-1]["hash"]
    return rows


def tamper(seq: int, column: str, value: Any) -> None:
    """An attacker's raw ``UPDATE audit_auditevent SET <column> = value WHERE seq = <seq>``."""
    if isinstance(value, datetime):
        value = connection.ops.adapt_datetimefield_value(value)
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE audit_auditevent SET {column} = %s WHERE seq = %s", [value, seq])


def shift_seqs(from_seq: int, by: int) -> None:
    """Renumber rows ``seq >= from_seq`` by ``by`` in two steps, so the unique index never trips."""
    far = 10**9
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET seq = seq + %s WHERE seq >= %s", [far, from_seq])
        cursor.execute("UPDATE audit_auditevent SET seq = seq - %s WHERE seq >= %s", [far - by, far])


def swap_seqs(a: int, b: int) -> None:
    far = 10**9
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [far, a])
        cursor.execute("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [a, b])
        cursor.execute("UPDATE audit_auditevent SET seq = %s WHERE seq = %s", [b, far])


def delete_rows(sql_where: str, params: list[Any]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM audit_auditevent WHERE {sql_where}", params)


def changed(column: str, value: Any) -> Any:
    """A different value of the same column: what an attacker's edit writes."""
    if column == "seq":
        return value + 5000
    if column == "time":
        return value + timedelta(microseconds=1)
    if column == "kind":
        return int(AuditKind.HOOK_DENIED) if value != AuditKind.HOOK_DENIED else int(AuditKind.CASE_CREATED)
    if column == "actor_type":
        return "system" if value != "system" else "user"
    if column == "payload":
        return value.replace('"n":', '"n":1')
    if column in {"prev_hash", "hash"}:
        return ("1" if value[0] != "1" else "2") + value[1:]
    return value + "x"


ROW_COLUMNS = [
    "seq", "time", "actor_type", "actor_id", "kind", "subject_type", "subject_id", "payload",
    "prev_hash", "hash",
]  # fmt: skip
