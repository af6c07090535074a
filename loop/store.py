"""The durable store (SPEC L4, L5): sessions, frames, tool calls, events, exchanges and receipts.

:class:`Store` is composed of small collaborators over one :class:`~loop.journal.Journal` (the
injected audit sink, clock and bus): :class:`~loop.store_exchanges.ExchangeLog` for exchanges and
:class:`~loop.store_calls.CallLog` for tool calls. Every query lives in :mod:`loop.sql`. Every
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
    """The kernel's one door to the database. Its operations belong to its collaborators and are
    exposed here under their own names, so callers hold one object."""

    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES,
        lease_seconds: float = DEFAULT_LEASE_SECONDS, fence: tuple[int, str] | None = None,
    ) -> None:
        self.journal = Journal(audit=audit, clock=clock, bus=bus, payload_cap=payload_cap, fence=fence)
        self.calls = CallLog(self.journal)
        self.exchanges = ExchangeLog(self.journal, self.calls, lease_seconds=lease_seconds)
        self.frames = FrameLog(self.journal, self.calls)
        self.work = WorkLog(self.journal)
        self.lease_seconds = lease_seconds
        self.compactions = CompactionLog(self.journal)
        # Exchanges: admission → claim → (park → reopen)* → settle | mark_broken.
        self.admit = self.exchanges.admit
        self.claim = self.exchanges.claim
        self.claim_for_recovery = self.exchanges.claim_for_recovery
        self.renew = self.exchanges.renew
        self.release = self.exchanges.release
        self.needing_recovery = self.exchanges.needing_recovery
        self.stranded = self.exchanges.stranded
        self.active_exchange = self.exchanges.active
        self.reopen = self.exchanges.reopen
        self.root_frame = self.exchanges.root_frame
        self.exchange = self.exchanges.get
        self.find_exchange = self.exchanges.find
        self.request_cancel = self.exchanges.request_cancel
        self.cancel_requested = self.exchanges.cancel_requested
        self.record_message_end = self.exchanges.record_message_end
        self.finish_turn = self.exchanges.finish_turn
        self.park = self.exchanges.park
        self.settle = self.exchanges.settle
        self.mark_broken = self.exchanges.mark_broken
        # Tool calls: planned → running → a result, or → awaiting_human and on.
        self.record_intent = self.calls.record_intent
        self.record_result = self.calls.record_result
        self.cancel_calls = self.calls.cancel_calls
        self.take_awaiting = self.calls.take_awaiting
        self.awaiting_calls = self.calls.awaiting_calls
        self.calls_in = self.calls.calls_in
        self.call = self.calls.call
        # Child frames (delegates): open → (turns) → close, or finish with the last message end.
        self.open_frame = self.frames.open
        self.close_frame = self.frames.close
        self.finish_child_turn = self.frames.finish
        self.frame_turns = self.frames.turns
        # Compactions (SPEC L14): the window they start, the episode's count and latch, the commit.
        self.replay_window = self.compactions.replay_window
        self.compaction_episode = self.compactions.episode
        self.commit_compaction = self.compactions.commit
        self.stop_at_quota = self.compactions.stop_at_quota
        self.end_child = self.frames.end_child
        self.cancel_open_frames = self.frames.cancel_open
        self.open_children = self.frames.open_children
        self.child_frame_of = self.frames.child_of
        self.frame = self.frames.get
        self.frame_rows = self.frames.rows_of
        self.frame_ancestors = self.frames.ancestors

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
        with transaction.atomic():
            rows.scratchpad_set(session_id, key, value, self.journal.now())
            self.journal.audit("loop.scratchpad.set", principal=principal, subject_type="session",
                               subject_id=session_id, payload={"key": key, "bytes": len(value.encode("utf-8"))})

    def scratchpad_get(self, session_id: int, key: str) -> str | None:
        return rows.scratchpad_get(session_id, key)


__all__ = ["Admission", "Ledger", "ParsedCall", "Store", "build_receipt", "parse_arguments", "parsed_from_row"]
