"""The store's frame writes (SPEC S1, S2): a delegate's child frame opens with its task as the first
row of its own narrative and closes with its outcome; each is one transaction with its audit row."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from loop import sql
from loop.digest import events_digest
from loop.events import EventKind
from loop.journal import Journal
from loop.models import Exchange, Frame, FrameStatus
from loop.providers.base import AssembledTurn
from loop.sql import events as event_rows
from loop.sql import frames as rows
from loop.store_calls import CallLog


class FrameLog:
    """Child frames and the narrative rows that open and close them."""

    def __init__(self, journal: Journal, calls: CallLog) -> None:
        self.journal = journal
        self.calls = calls

    def open(
        self, *, exchange: Exchange, parent: Frame, parent_call_id: int, agent: str, narrative: str, task: str,
        selection: Mapping[str, Any], tools: Sequence[str], principal: str,
    ) -> Frame:
        """Open a child frame one level below ``parent``; its narrative starts with the task."""
        with transaction.atomic():
            frame = rows.open_child(session_id=exchange.session_id, exchange_id=exchange.pk, depth=parent.depth + 1,
                                    agent=agent, narrative=narrative, parent_call_id=parent_call_id,
                                    selection=selection, now=self.journal.now())
            opened = {"frame": frame.pk, "depth": frame.depth, "agent": agent, "parent_frame": parent.pk,
                      "parent_call": parent_call_id, "selection": dict(selection), "tools": list(tools)}
            base = f"s{exchange.session_id}:{narrative}e{exchange.number}"
            self.journal.append(exchange.session_id, EventKind.FRAME_OPENED, opened, f"{base}:opened",
                                exchange_id=exchange.pk, narrative=narrative)
            user = {"content": task, "author": f"agent:{parent.agent}"}
            seq = self.journal.append(exchange.session_id, EventKind.USER, user, f"{base}:user",
                                      exchange_id=exchange.pk, narrative=narrative)
            self.journal.audit("loop.frame.opened", principal=principal, subject_type="frame", subject_id=frame.pk,
                               payload={**opened, "exchange": exchange.pk, "narrative": narrative, "seq": seq,
                                        "digest": events_digest([(seq, EventKind.USER, user)])})
            self.journal.wake(exchange.session_id, seq)
        return frame

    def turns(self, exchange_id: int, *, narrative: str) -> int:
        """The model turns a frame's narrative has had in an exchange (the exchange's ``turns``
        counts every frame's)."""
        with sql.cursor() as cursor:
            return event_rows.frame_turns(cursor, exchange_id=exchange_id, narrative=narrative)

    def close(self, frame: Frame, *, outcome: str, principal: str, exchange: Exchange) -> None:
        with transaction.atomic():
            self._close(frame, outcome=outcome, principal=principal, exchange=exchange)

    def finish(
        self, *, exchange: Exchange, frame: Frame, turn: int, assembled: AssembledTurn, principal: str,
        spent_tokens: int, outcome: str,
    ) -> None:
        """A child's tool-free last turn: its message end and its frame's close commit together."""
        with transaction.atomic():
            self.calls.message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            self._close(frame, outcome=outcome, principal=principal, exchange=exchange)

    def _close(self, frame: Frame, *, outcome: str, principal: str, exchange: Exchange) -> None:
        assert sql.in_transaction()
        now = self.journal.now()
        if not rows.close(frame.pk, outcome=outcome, now=now):
            return
        frame.status, frame.outcome, frame.closed_at = FrameStatus.CLOSED, outcome, now
        payload = {"frame": frame.pk, "depth": frame.depth, "agent": frame.agent, "outcome": outcome}
        seq = self.journal.append(frame.session_id, EventKind.FRAME_CLOSED, payload,
                                  f"s{frame.session_id}:{frame.narrative}e{exchange.number}:closed",
                                  exchange_id=exchange.pk, narrative=frame.narrative)
        self.journal.audit("loop.frame.closed", principal=principal, subject_type="frame", subject_id=frame.pk,
                           payload={**payload, "exchange": exchange.pk, "seq": seq})
        self.journal.wake(frame.session_id, seq)
