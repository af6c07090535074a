"""Writes to the audit log. :func:`audit_append` is the only code that ever creates a row.

A single chain is a global serialisation point: every audited change in the deployment passes
through one lock. Keeping ``audit_append`` the only entry means partitioning the chain later (one
chain per tenant, say) changes this module and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction

from audit import chain
from audit.actors import Actor
from audit.chain import GENESIS
from audit.kinds import AuditKind, live_topics
from audit.models import ActorType, AuditEvent, ChainHead
from audit.selectors import audit_hashes_at, audit_rows_in_chain_order, chain_head_latest, chain_heads
from skald.core import clock
from skald.core.errors import NotFound
from skald.core.live import live_announce_on_commit

# pg_advisory_xact_lock key for appends: "skald" in ASCII, chain number 1. Any change is a
# deployment-wide event (old and new writers would stop excluding each other).
CHAIN_LOCK_KEY = 0x736B616C64_0001
CHAIN_SUBJECT = ("audit.chain", "main")
_FIELD_MAX = 64  # the model's CharField lengths; SQLite would not enforce them, PostgreSQL would


class AuditOutsideTransaction(RuntimeError):
    """``audit_append`` was called in autocommit: the row could outlive a rolled-back change."""


def _require_short(name: str, value: str) -> None:
    if not value or len(value) > _FIELD_MAX:
        raise ValueError(f"audit {name} must be 1 to {_FIELD_MAX} characters, got {len(value)}")


_Tip = tuple[int, str, datetime | None]  # seq, hash, time of the chain's last row


def _read_tip(cursor: Any) -> _Tip:
    """SQLite: read the tip. The connection begins every transaction IMMEDIATE, so the
    database-wide write lock is already held and nobody else extends the tip until commit.
    (PostgreSQL takes its lock and reads its tip on the server: :func:`_linked_on_server`.)
    """
    cursor.execute("SELECT seq, hash, time FROM audit_auditevent ORDER BY seq DESC LIMIT 1")
    row = cursor.fetchone()
    if row is None:
        return 0, GENESIS, None
    time: datetime = row[2]  # naive UTC: Django's SQLite backend converts declared datetime columns
    return int(row[0]), row[1], time.replace(tzinfo=UTC)


def _now(not_before: datetime | None = None) -> datetime:
    """The clock in UTC, never earlier than ``not_before`` (the tip's time): a row's time never
    goes back along the chain, even when the wall clock steps back."""
    # datetime holds microseconds at most, exactly what SQLite and PostgreSQL store, so the time
    # hashed here is the time read back by the verifier.
    moment = clock.now()
    if moment.tzinfo is None:
        raise ValueError("the clock returned a naive datetime")
    moment = moment.astimezone(UTC)
    return max(moment, not_before) if not_before is not None else moment


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One row to append, as :func:`audit_append_statement` takes it."""

    actor: Actor
    kind: AuditKind
    subject_type: str
    subject_id: str | int
    payload: Mapping[str, Any]


def _checked(entry: AuditEntry) -> dict[str, Any]:
    """The row's fields but seq and hashes, validated and canonical (before the chain lock: a bad
    row fails without holding up other writers)."""
    kind = AuditKind(entry.kind)
    subject_id = str(entry.subject_id)
    actor = entry.actor
    if actor.type not in ActorType.values:
        raise ValueError(f"unknown actor type {actor.type!r}")
    for name, value in (("actor id", actor.id), ("subject_type", entry.subject_type), ("subject_id", subject_id)):
        _require_short(name, value)
    if not isinstance(entry.payload, Mapping):
        raise TypeError(f"audit payload must be a mapping, got {type(entry.payload).__name__}")
    return {
        "actor_type": str(actor.type),
        "actor_id": actor.id,
        "kind": int(kind),
        "subject_type": entry.subject_type,
        "subject_id": subject_id,
        "payload": chain.canonical_json(dict(entry.payload)),
    }


def _linked(rows: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """The one INSERT that appends ``rows`` to the chain: it holds the chain lock from when it
    runs until the transaction ends, and links the rows to the tip (seq, time, prev_hash, hash).

    Raw SQL: every audited write in the deployment passes here, and the ORM's query building
    would cost more than the statements themselves.
    """
    if connection.vendor == "postgresql":
        statement, params = _linked_on_server(rows)
    else:
        statement, params = _linked_here(rows)
    for fields in rows:  # once committed, each row's live topics are announced (skald.core.live)
        kind = AuditKind(fields["kind"])
        for topic in live_topics(kind):
            live_announce_on_commit(topic, kind=kind.label)
    return statement, params


# The columns every append writes, in the order both statements below produce them.
_COLUMNS = "seq, time, actor_type, actor_id, kind, subject_type, subject_id, payload, prev_hash, hash"
# The canonical JSON of a row's hashed array up to its seq: ``["skald.audit.v1",``.
_HASHED_HEAD = chain.canonical_json([chain.HASH_VERSION])[:-1] + ","


def _linked_on_server(rows: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """PostgreSQL: ``audit_chain_link`` (migration 0008) takes the chain lock, reads the tip and
    links the rows on the server, inside the INSERT itself: no round trip of its own, and the lock
    is taken only when the statement runs. The client sends the canonical JSON of each row's
    fields after its time; the server hashes exactly what :func:`audit.chain.row_hash` does."""
    columns = ("actor_type", "actor_id", "kind", "subject_type", "subject_id", "payload")
    linked = []
    for fields in rows:
        values = [fields[name] for name in columns]
        linked.append([chain.format_time(_now()), *values, chain.canonical_json(values)[1:-1]])
    params = [CHAIN_LOCK_KEY, GENESIS, _HASHED_HEAD, json.dumps(linked, ensure_ascii=False)]
    return (f"INSERT INTO audit_auditevent ({_COLUMNS}) SELECT * FROM audit_chain_link(%s, %s, %s, %s::json)",  # noqa: S608 - placeholders only
            params)


def _linked_here(rows: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """SQLite: link the rows to the tip in this process (the write lock is held since BEGIN)."""
    # Read on every append, even a second one in the same transaction: the read is one indexed row,
    # and it is right after any savepoint rollback (a tip remembered from an undone append is not).
    with connection.cursor() as cursor:
        seq, prev_hash, time = _read_tip(cursor)
    params: list[Any] = []
    for fields in rows:
        seq += 1
        fields["time"] = time = _now(not_before=time)
        fields["seq"], fields["prev_hash"] = seq, prev_hash
        fields["hash"] = prev_hash = chain.row_hash(**fields)
        params += [seq, connection.ops.adapt_datetimefield_value(fields["time"]), fields["actor_type"],
                   fields["actor_id"], fields["kind"], fields["subject_type"], fields["subject_id"],
                   fields["payload"], fields["prev_hash"], fields["hash"]]
    assert time is not None  # rows is never empty
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    return f"INSERT INTO audit_auditevent ({_COLUMNS}) VALUES {values}", params  # noqa: S608 - placeholders only


def audit_append(
    *,
    actor: Actor,
    kind: AuditKind,
    subject_type: str,
    subject_id: str | int,
    payload: Mapping[str, Any],
) -> AuditEvent:
    """Append one row to the chain inside the caller's transaction.

    The row commits or rolls back with the change it records; once it commits, its live topics
    (``audit.kinds.live_topics``) are announced to the admin pages that show them
    (``skald.core.live``). Call it late in the service's atomic block: the chain lock is held from
    here until that transaction ends, and every other audited write in the deployment waits for it.

    Raises:
        AuditOutsideTransaction: no transaction is open.
        ValueError / TypeError: an unknown kind, an over-long field, a payload that is not JSON.
    """
    if not connection.in_atomic_block:
        raise AuditOutsideTransaction("audit_append must run inside the transaction it records")
    fields = _checked(AuditEntry(actor, kind, subject_type, subject_id, payload))
    statement, params = _linked([fields])
    with connection.cursor() as cursor:
        cursor.execute(f"{statement} RETURNING id, seq, time, prev_hash, hash", params)
        row_id, seq, time, prev_hash, digest = cursor.fetchone()
    if connection.vendor == "postgresql":  # linked on the server
        fields.update(seq=seq, time=time, prev_hash=prev_hash, hash=digest)
    return AuditEvent(pk=row_id, **fields)


def audit_append_statement(entries: Sequence[AuditEntry]) -> tuple[str, list[Any]]:
    """The one INSERT that appends ``entries`` in order, for the caller to run in this transaction
    before it commits, alone or as part of a larger statement (the kernel store sends it with its
    own rows: one round trip for both).

    Same chain, lock and checks as :func:`audit_append`. On PostgreSQL the statement itself takes
    the chain lock, reads the tip and links the rows (``audit_chain_link``); on SQLite, whose write
    lock is held since BEGIN, they are linked here. Run nothing else that appends before the
    statement has run. Returns ``("", [])`` for no entries.

    Raises:
        AuditOutsideTransaction: no transaction is open.
        ValueError / TypeError: as :func:`audit_append`; nothing is locked or written then.
    """
    if not connection.in_atomic_block:
        raise AuditOutsideTransaction("audit_append_statement must run inside the transaction it records")
    rows = [_checked(entry) for entry in entries]
    return _linked(rows) if rows else ("", [])


def chain_head_record(*, actor: Actor) -> ChainHead:
    """Record the current head (seq + hash), HMAC-signed when ``SKALD_AUDIT_KEY`` is set.

    Opens its own durable transaction: a head must not be recorded inside a change that could
    still roll back.

    Order: the CHAIN_HEAD_RECORDED row is appended first and the head recorded is that row. The
    head thus covers its own recording, so cutting even that last row off is detected, and a
    head never points at seq 0 of an empty chain. The reverse order (record, then append) would
    leave every head one row behind the event that documents it. Both writes share one
    transaction under the chain lock, so no other append can slip between them.
    """
    key = settings.SKALD_AUDIT_KEY
    with transaction.atomic(durable=True):
        event = audit_append(
            actor=actor,
            kind=AuditKind.CHAIN_HEAD_RECORDED,
            subject_type=CHAIN_SUBJECT[0],
            subject_id=CHAIN_SUBJECT[1],
            payload={"signed": bool(key)},
        )
        signature = (
            chain.head_signature(key, seq=event.seq, hash=event.hash, recorded_at=event.time) if key else ""
        )
        return ChainHead.objects.create(
            seq=event.seq, hash=event.hash, recorded_at=event.time, signature=signature
        )


def chain_head_export(*, head: ChainHead | None = None) -> dict[str, Any]:
    """``{seq, hash, recorded_at, signature}`` of ``head`` (default: the latest recorded head).

    Keep it outside the database: ``verify_chain --head FILE`` then detects a tail truncated
    together with the heads table. ``signature`` is ``None`` when no key was configured.

    Raises:
        NotFound: no head has been recorded yet.
    """
    head = head or chain_head_latest()
    if head is None:
        raise NotFound("No chain head has been recorded yet.", code="no_chain_head")
    return {
        "seq": head.seq,
        "hash": head.hash,
        "recorded_at": chain.format_time(head.recorded_at),
        "signature": head.signature or None,
    }


def chain_head_export_latest() -> dict[str, Any] | None:
    """The latest recorded head as exported, or ``None`` before the first recording."""
    latest = chain_head_latest()
    return chain_head_export(head=latest) if latest is not None else None


def chain_verify(*, exported_head: Mapping[str, Any] | None = None) -> chain.VerifyReport:
    """Verify the whole chain against every recorded head (and ``exported_head`` if given).

    Runs in autocommit, not in a transaction: on SQLite a transaction would take the write lock
    and stall every writer for the length of the scan. Heads are read before rows, so any head
    seen has its row committed and a concurrent append only lengthens the chain being read.

    Raises:
        ValueError: ``exported_head`` is malformed.
    """
    heads: list[chain.HeadLike] = list(chain_heads())
    if exported_head is not None:
        heads.append(chain.ExportedHead.parse(exported_head))
    key = settings.SKALD_AUDIT_KEY or None
    report = chain.verify_rows(audit_rows_in_chain_order(), heads, key=key)
    if report.ok:
        _checkpoint_save(VerifiedTip(report.tip_seq, report.tip_hash, clock.now()))
    return report


@dataclass(frozen=True, slots=True)
class VerifiedTip:
    """The tip the last passing verification reached, and when the whole chain last passed."""

    seq: int
    hash: str
    full_at: datetime


def chain_verify_incremental() -> tuple[chain.VerifyReport, VerifiedTip | None]:
    """Verify only what was appended since the last passing verification: its cost follows the
    new rows, not the chain's length (the auditor's home runs it on every refresh).

    The remembered tip (in the cache, shared by the processes) is trusted only while the stored row
    at its seq still carries its hash and every recorded head at or below it still matches its row;
    otherwise, or with nothing remembered, the whole chain is verified. What an incremental pass
    cannot see: an old row whose content no longer matches its own stored hash while every row
    after it is untouched (a rewrite that re-hashes forward reaches the remembered tip and is
    seen). :func:`chain_verify` reads everything and finds that too.

    Returns:
        The report (``rows`` counts the rows this pass read) and the tip it leaves remembered, whose
        ``full_at`` says when the whole chain last passed (``None`` when the chain is broken).
    """
    last = _checkpoint_load()
    heads = chain_heads()
    if last is not None:
        below = [head for head in heads if head.seq <= last.seq]
        stored = audit_hashes_at({last.seq} | {head.seq for head in below})
        if stored.get(last.seq) != last.hash or any(stored.get(head.seq) != head.hash for head in below):
            last = None
    if last is None:
        report = chain_verify()
        return report, _checkpoint_load() if report.ok else None
    report = chain.verify_rows(audit_rows_in_chain_order(after=last.seq), heads,
                               key=settings.SKALD_AUDIT_KEY or None, start=(last.seq, last.hash))
    if not report.ok:
        return report, None
    tip = VerifiedTip(report.tip_seq, report.tip_hash, last.full_at)
    _checkpoint_save(tip)
    return report, tip


def chain_verified_tip_forget() -> None:
    """Forget the remembered tip: the next incremental pass verifies the whole chain."""
    cache.delete(_checkpoint_key())


def _checkpoint_key() -> str:
    # One database, one chain: deployments (and test databases) sharing a cache keep apart.
    return f"skald:audit:verified-tip:{connection.settings_dict.get('NAME') or ''}"


def _checkpoint_load() -> VerifiedTip | None:
    raw = cache.get(_checkpoint_key())
    try:
        return VerifiedTip(int(raw["seq"]), str(raw["hash"]), datetime.fromisoformat(raw["full_at"]))
    except (TypeError, KeyError, ValueError):
        return None  # nothing remembered, or not ours: verify everything


def _checkpoint_save(tip: VerifiedTip) -> None:
    cache.set(_checkpoint_key(), {"seq": tip.seq, "hash": tip.hash, "full_at": tip.full_at.isoformat()}, None)
