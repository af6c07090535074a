"""The store's narrative core: appending session-event rows, auditing, waking viewers after commit.

Every collaborator of :class:`~loop.store.Store` writes through one :class:`Journal`, which holds
the injected ports (audit sink, clock, bus) and the payload cap.

A hot store transaction runs as a :meth:`Journal.batch`: its narrative rows and audit rows are
kept in memory while it runs (each row's seq is known at once: the session row is locked and its
``last_seq`` read once) and written just before it commits, as one multi-row INSERT for the rows
and one for the audit chain. The transaction, what it writes and what commits together do not
change; only the number of statements does.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from loop import sql
from loop.bounds import PAYLOAD_CAP_BYTES
from loop.digest import canonical
from loop.errors import LeaseLost, PayloadTooLarge, PersistError
from loop.ports import AuditRecord, AuditSink, Clock, EventBus
from loop.sql import batch as batch_sql
from loop.sql import events
from loop.sql import exchanges as exchange_rows


@dataclass
class _Batch:
    """What a batched transaction has appended and not yet written."""

    last_seq: dict[int, int] = field(default_factory=dict)  # session → last seq handed out
    rows: list[events.EventRow] = field(default_factory=list)
    keys: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # key → (seq, kind, body)
    audits: list[tuple[AuditSink, AuditRecord]] = field(default_factory=list)
    counters: dict[int, dict[str, int]] = field(default_factory=dict)  # session → other counters to set
    writes: list[batch_sql.Write] = field(default_factory=list)
    wakes: dict[int, int] = field(default_factory=dict)  # session → last seq to wake its viewers for
    written_seq: dict[int, int] = field(default_factory=dict)  # session → last_seq as stored
    fences_held: set[tuple[int, str]] = field(default_factory=set)  # (exchange, claim) checked and row-locked


# One batch per thread (a thread has its own database connection), shared by every Journal: a
# capped store's journal appending inside another journal's batch joins it, so seqs stay dense.
_local = threading.local()


def _lease_lost(exchange_id: int | None) -> LeaseLost:
    return LeaseLost(f"exchange {exchange_id}: another driver holds it now; nothing more is written")


def _current() -> _Batch | None:
    return getattr(_local, "batch", None)


class Journal:
    """Append-only narrative rows, exactly once by idempotency key, and audit rows beside them."""

    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES,
        fence: tuple[int, str] | None = None,
    ) -> None:
        self.audit_sink = audit
        self.clock = clock
        self.bus = bus
        self.payload_cap = payload_cap
        # A driver's journal: (exchange id, claim token). Every transaction that appends a row to
        # that exchange checks, before the row, that the claim is still its own (lease fencing).
        self.fence = fence

    def now(self) -> datetime:
        return self.clock.now()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction whose rows and audit rows are written together just before it commits
        (a batch inside a batch joins it). Inside, an idempotency key may not repeat a stored
        row's key: the hot paths append fresh keys only; a repeat refuses at the write
        (``idempotency_conflict``) and the transaction rolls back. Nothing inside may read back
        the rows it appended before :meth:`flush_rows`."""
        if _current() is not None:
            yield
            return
        with transaction.atomic():
            _local.batch = batch = _Batch()
            try:
                yield
                for session_id, last_seq in batch.wakes.items():  # one wake per session, not per row
                    self._wake_on_commit(session_id, last_seq)
                self._flush_rows(batch, audit=self._audit_statement(batch), last=True)
            finally:
                _local.batch = None

    def audit(self, label: str, *, principal: str, subject_type: str, subject_id: object,
              payload: Mapping[str, Any]) -> None:
        """One audit row, inside the caller's transaction."""
        batch = _current()
        if batch is not None:
            batch.audits.append((self.audit_sink, AuditRecord(label, principal, subject_type, str(subject_id),
                                                              payload)))
            return
        self.audit_sink.append(label, principal=principal, subject_type=subject_type, subject_id=str(subject_id),
                               payload=payload)

    def seed_seq(self, session_id: int, last_seq: int) -> None:
        """The caller read the locked session's ``last_seq``: the batch need not read it again."""
        batch = _current()
        if batch is not None and session_id not in batch.last_seq:
            batch.last_seq[session_id] = batch.written_seq[session_id] = last_seq

    def write(self, write: batch_sql.Write) -> None:
        """An UPDATE nobody reads the result of: now, or with the batch's rows."""
        batch = _current()
        if batch is None:
            with sql.cursor() as cursor:
                batch_sql.execute(cursor, write)
            return
        for index, pending in enumerate(batch.writes):
            if pending.row == write.row:
                if write.supersedes:
                    batch.writes[index] = write
                    return
                self._flush_rows(batch)  # one change of a row per statement
                break
        batch.writes.append(write)

    def set_session_counter(self, session_id: int, name: str, value: int) -> None:
        """Set a counter of the (locked) session row: now, or with the batch's rows."""
        assert name == "exchange_count", name
        batch = _current()
        if batch is None:
            with sql.cursor() as cursor:
                cursor.execute("UPDATE loop_session SET exchange_count = %s WHERE id = %s", [value, session_id])
            return
        batch.counters.setdefault(session_id, {})[name] = value

    def append(
        self,
        session_id: int,
        kind: str,
        payload: Mapping[str, Any],
        key: str,
        *,
        exchange_id: int | None = None,
        narrative: str = "",
        fresh: bool = False,
    ) -> int:
        """Append one row inside the caller's transaction and return its seq. An exact repeat of
        ``key`` returns the stored row's seq; the same key with other content refuses.

        ``fresh``: the caller knows no stored row can have this key (a new exchange's user row, a
        planned call's intent): inside a batch the key is then not looked up first. Were it
        stored after all, the batch refuses at its write (``idempotency_conflict``) and rolls back.
        """
        assert sql.in_transaction(), "narrative rows are appended inside a transaction"
        body = canonical(payload)
        size = len(body.encode("utf-8"))
        if size > self.payload_cap:
            raise PayloadTooLarge(f"{kind} payload is {size} bytes, over the {self.payload_cap}-byte cap")
        batch = _current()
        if batch is not None:
            return self._append_batched(batch, session_id, kind, body, key, exchange_id, narrative, fresh)
        with sql.cursor() as cursor:
            seq, inserted = events.append_event(cursor, session_id=session_id, exchange_id=exchange_id, kind=kind,
                                                narrative=narrative, body=body, key=key, created_at=self.now())
            if seq is None:
                raise PersistError(f"session {session_id} does not exist", code="session_missing")
            if inserted:
                self._check_fence(exchange_id)  # refused: the caller's transaction rolls the row back
                return seq
            # The key is stored already: an exact repeat returns that row, anything else refuses.
            events.give_back_seq(cursor, session_id)
            existing = events.find_event(cursor, key)
        assert existing is not None
        if existing[1] != kind or canonical(existing[2]) != body:
            raise PersistError(f"idempotency key {key} reused with other content", code="idempotency_conflict")
        return existing[0]

    def hold_fence(self, session_id: int) -> None:
        """Refuse with LeaseLost, inside the caller's transaction, when this journal is fenced and
        its claim was taken over; the exchange's row stays locked (PostgreSQL) until commit. For
        an effect outside the journal that must commit only while the driver holds its lease."""
        fence = self.fence
        if fence is None:
            return
        assert sql.in_transaction(), "a fence is held inside the effect's transaction"
        batch = _current()
        if batch is not None:
            if session_id not in batch.last_seq:
                batch.last_seq[session_id] = self._lock_session(batch, session_id, fence[0])
            self._check_fence(fence[0], batch)
            return
        with sql.cursor() as cursor:
            locked = events.lock_last_seq_and_claim(cursor, session_id, fence[0])
        if locked is None:
            raise PersistError(f"session {session_id} does not exist", code="session_missing")
        if locked[1] != fence[1]:
            raise _lease_lost(fence[0])

    def _check_fence(self, exchange_id: int | None, batch: _Batch | None = None) -> None:
        """Refuse with LeaseLost when this journal is fenced on ``exchange_id`` and its claim was
        taken over. The check row-locks the exchange (PostgreSQL) until commit, so a batch checks
        once for all its rows. It runs once the session row is locked: every writer locks the
        session before its exchange, and the other order deadlocks with them."""
        fence = self.fence
        if fence is None or exchange_id != fence[0] or (batch is not None and fence in batch.fences_held):
            return
        with sql.cursor() as cursor:
            if not exchange_rows.holds_claim(cursor, exchange_id, fence[1]):
                raise _lease_lost(exchange_id)
        if batch is not None:
            batch.fences_held.add(fence)

    def _lock_session(self, batch: _Batch, session_id: int, exchange_id: int | None) -> int:
        """Lock the session row and read its ``last_seq`` for the batch; a fenced journal checks
        its claim in the same statement (one round trip, the same lock order)."""
        fence = self.fence
        fenced = fence is not None and exchange_id == fence[0] and fence not in batch.fences_held
        with sql.cursor() as cursor:
            if fenced:
                assert fence is not None and exchange_id is not None
                locked = events.lock_last_seq_and_claim(cursor, session_id, exchange_id)
                last, claim = locked if locked is not None else (None, "")
            else:
                last = events.lock_last_seq(cursor, session_id)
        if last is None:
            raise PersistError(f"session {session_id} does not exist", code="session_missing")
        if fenced:
            assert fence is not None
            if claim != fence[1]:
                raise _lease_lost(exchange_id)
            batch.fences_held.add(fence)
        batch.written_seq[session_id] = last
        return last

    def _append_batched(self, batch: _Batch, session_id: int, kind: str, body: str, key: str,
                        exchange_id: int | None, narrative: str, fresh: bool) -> int:
        repeat = batch.keys.get(key)
        if repeat is None and not fresh:
            with sql.cursor() as cursor:
                stored = events.find_event(cursor, key)
            if stored is not None:
                repeat = (stored[0], stored[1], canonical(stored[2]))
        if repeat is not None:
            if repeat[1:] != (kind, body):
                raise PersistError(f"idempotency key {key} reused with other content", code="idempotency_conflict")
            return repeat[0]
        last = batch.last_seq.get(session_id)
        if last is None:
            last = self._lock_session(batch, session_id, exchange_id)
        self._check_fence(exchange_id, batch)
        seq = batch.last_seq[session_id] = last + 1
        batch.keys[key] = (seq, kind, body)
        batch.rows.append(events.EventRow(session_id=session_id, seq=seq, exchange_id=exchange_id, kind=kind,
                                          narrative=narrative, body=body, key=key, created_at=self.now()))
        return seq

    def flush_rows(self) -> None:
        """Write the batch's narrative rows now (before a read that must see them)."""
        batch = _current()
        if batch is not None:
            self._flush_rows(batch)

    @staticmethod
    def _flush_rows(batch: _Batch, audit: tuple[str, list[Any]] = ("", []), *, last: bool = False) -> None:
        """Write what the batch holds; ``last``: the transaction commits next, so on PostgreSQL the
        statement travels with its COMMIT (:func:`loop.sql.sent_with_commit`)."""
        sessions: dict[int, dict[str, int]] = {sid: dict(columns) for sid, columns in batch.counters.items()}
        for session_id, last_seq in batch.last_seq.items():
            if batch.written_seq.get(session_id) != last_seq:
                sessions.setdefault(session_id, {})["last_seq"] = last_seq
        writes = [*batch.writes, *([batch_sql.Write(("audit", 0), *audit)] if audit[0] else [])]
        if not (batch.rows or writes or sessions):
            return
        try:
            with sql.cursor() as cursor, sql.sent_with_commit() if last else nullcontext():
                batch_sql.flush(cursor, batch.rows, sessions, writes)
        except IntegrityError as error:
            if batch_sql.repeats_a_key(error):
                raise PersistError("a row repeats a stored idempotency key", code="idempotency_conflict") from error
            raise
        batch.rows, batch.writes, batch.counters = [], [], {}
        batch.written_seq.update(batch.last_seq)

    @staticmethod
    def _audit_statement(batch: _Batch) -> tuple[str, list[Any]]:
        """The batch's audit rows as one statement (their sink takes the chain lock and links them)."""
        if not batch.audits:
            return "", []
        sinks = {id(sink) for sink, _record in batch.audits}
        if len(sinks) > 1:  # stores over different sinks in one transaction: each appends its own, in order
            for sink, record in batch.audits:
                sink.append(record.label, principal=record.principal, subject_type=record.subject_type,
                            subject_id=record.subject_id, payload=record.payload)
            return "", []
        return batch.audits[0][0].append_statement([record for _sink, record in batch.audits])

    def wake(self, session_id: int, last_seq: int) -> None:
        """Wake the session's viewers once the transaction commits (never before: a viewer must
        find the rows it is woken for). A batch wakes each session once, for its last row."""
        batch = _current()
        if batch is not None:
            batch.wakes[session_id] = max(last_seq, batch.wakes.get(session_id, 0))
            return
        self._wake_on_commit(session_id, last_seq)

    def _wake_on_commit(self, session_id: int, last_seq: int) -> None:
        transaction.on_commit(lambda: self.bus.committed(session_id, last_seq))
