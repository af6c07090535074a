"""The durable store (SPEC L4, L5): sessions, frames, tool calls, events, exchanges and receipts.

:class:`Store` is composed of small parts over one :class:`~loop.journal.Journal` (the injected
audit sink, clock and bus), each reached by one name: ``store.exchanges``
(:class:`~loop.store_exchanges.ExchangeLog`), ``store.calls`` (:class:`~loop.store_calls.CallLog`),
``store.frames`` (:class:`~loop.store_frames.FrameLog`), ``store.compactions``
(:class:`~loop.store_compaction.CompactionLog`) and ``store.work`` (:class:`~loop.store_work.WorkLog`).
Every query lives in :mod:`loop.sql`. Every
method that changes state is one transaction that also appends its audit row; viewers are woken
only after commit. Narrative rows are append-only and exactly-once by idempotency key.

The store (this module, its collaborators and :mod:`loop.sql`) is the only part of the kernel
that touches the database.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from loop import sql
from loop.bounds import DEFAULT_LEASE_SECONDS, PAYLOAD_CAP_BYTES
from loop.digest import events_digest
from loop.events import CONVERSATION_KINDS
from loop.journal import Journal
from loop.models import Session, SessionEvent
from loop.outcomes import build_receipt
from loop.ports import AuditSink, Clock, EventBus
from loop.projection import EventRow, Replay
from loop.sql import events as event_rows
from loop.sql import exchanges as rows
from loop.store_calls import CallLog, ParsedCall, parse_arguments, parsed_from_row
from loop.store_compaction import CompactionLog
from loop.store_exchanges import Admission, ExchangeLog, Ledger
from loop.store_frames import FrameLog
from loop.store_work import WorkLog


class Store:
    """The kernel's one door to the database, in parts: ``store.exchanges``, ``store.calls``,
    ``store.frames``, ``store.compactions`` and ``store.work`` own their rows' writes and reads;
    sessions, free-standing rows, replay and the scratchpad are methods here."""

    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES,
        lease_seconds: float = DEFAULT_LEASE_SECONDS, fence: tuple[int, str] | None = None,
    ) -> None:
        self.journal = Journal(audit=audit, clock=clock, bus=bus, payload_cap=payload_cap, fence=fence)
        # Tool calls: planned → running → a result, or → awaiting_human and on.
        self.calls = CallLog(self.journal)
        # Exchanges: admission → claim → (park → reopen)* → settle | mark_broken.
        self.exchanges = ExchangeLog(self.journal, self.calls, lease_seconds=lease_seconds)
        # Child frames (delegates): open → (turns) → close, or finish with the last message end.
        self.frames = FrameLog(self.journal, self.calls)
        # Compactions (SPEC L14): the window they start, the episode's count and latch, the commit.
        self.compactions = CompactionLog(self.journal)
        # The outbox: work recorded with the need, handed out until done.
        self.work = WorkLog(self.journal)
        self.lease_seconds = lease_seconds

    @property
    def payload_cap(self) -> int:
        return self.journal.payload_cap

    def capped(self, payload_cap: int) -> Store:
        """This store with another payload cap (``Bounds.payload_cap`` of an agent or deployment)."""
        if payload_cap == self.payload_cap:
            return self
        return Store(audit=self.journal.audit_sink, clock=self.journal.clock, bus=self.journal.bus,
                     payload_cap=payload_cap, lease_seconds=self.lease_seconds, fence=self.journal.fence)

    def fenced(self, exchange_id: int, claim_token: str) -> Store:
        """This store for the driver holding ``claim_token`` on ``exchange_id``: once its lease is
        taken over, every row it would append to that exchange refuses (:class:`LeaseLost`)."""
        return Store(audit=self.journal.audit_sink, clock=self.journal.clock, bus=self.journal.bus,
                     payload_cap=self.payload_cap, lease_seconds=self.lease_seconds,
                     fence=(exchange_id, claim_token))

    def hold_fence(self, session_id: int) -> None:
        """Inside the caller's transaction, before an effect a tool commits outside the journal (a
        workspace write, a scratchpad value): refuse with :class:`LeaseLost` when this store's claim
        was taken over. The journal's own fence check, in the same lock order (the session row,
        then the exchange's claim, row-locked on PostgreSQL until commit). An unfenced store passes."""
        self.journal.hold_fence(session_id)

    def release_thread(self) -> None:
        """A helper thread that used the store is ending: close its connections."""
        sql.release_thread()

    # --- sessions ---------------------------------------------------------------------------------

    def create_session(self, *, owner_id: int, agent: str, source: str, title: str, principal: str) -> Session:
        with transaction.atomic():
            session = rows.create_session(owner_id=owner_id, agent=agent, source=source, title=title,
                                          now=self.journal.now())
            self.journal.audit("loop.session.created", principal=principal, subject_type="session",
                               subject_id=session.pk, payload={"agent": agent, "source": source})
        return session

    def append_event(
        self,
        *,
        session_id: int,
        kind: str,
        payload: Mapping[str, Any],
        key: str,
        principal: str,
        exchange_id: int | None = None,
        narrative: str = "",
    ) -> SessionEvent:
        """Append a row on its own (notes, approval events from the product), audited."""
        with transaction.atomic():
            seq = self.journal.append(session_id, kind, payload, key, exchange_id=exchange_id, narrative=narrative)
            self.journal.audit(
                "loop.event.appended", principal=principal, subject_type="session", subject_id=session_id,
                payload={"seq": seq, "kind": kind, "digest": events_digest([(seq, kind, payload)])},
            )
            self.journal.wake(session_id, seq)
        return event_rows.event_at(session_id, seq)

    def replay(self, session_id: int, *, narrative: str = "", cap: int, after_seq: int = 0) -> Replay:
        """The last ``cap`` conversation rows of a narrative (after ``after_seq``), oldest first,
        whether older rows were cut off, and the session's stamp."""
        with sql.cursor() as cursor:
            fetched, stamp = event_rows.conversation_rows(cursor, session_id=session_id, narrative=narrative,
                                                          kinds=CONVERSATION_KINDS, after_seq=after_seq, limit=cap + 1)
        window = [EventRow(seq=seq, kind=kind, payload=payload, narrative=narrative)
                  for seq, kind, payload in fetched[:cap]]
        window.reverse()
        return Replay(window, len(fetched) > cap, stamp)

    # --- scratchpad -------------------------------------------------------------------------------

    def scratchpad_set(self, session_id: int, key: str, value: str, *, principal: str) -> None:
        """Set a value (last writer wins); a fenced store refuses once its claim was taken over."""
        with transaction.atomic():
            self.journal.hold_fence(session_id)
            rows.scratchpad_set(session_id, key, value, self.journal.now())
            self.journal.audit("loop.scratchpad.set", principal=principal, subject_type="session",
                               subject_id=session_id, payload={"key": key, "bytes": len(value.encode("utf-8"))})

    def scratchpad_get(self, session_id: int, key: str) -> str | None:
        return rows.scratchpad_get(session_id, key)


__all__ = ["Admission", "Ledger", "ParsedCall", "Store", "build_receipt", "parse_arguments", "parsed_from_row"]
