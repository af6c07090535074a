"""The store's frame writes (SPEC S1, S2): a delegate's child frame opens with its task as the first
row of its own narrative and closes with its outcome; each is one transaction with its audit row."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import transaction

from loop import sql
from loop.digest import events_digest
from loop.events import EventKind
from loop.journal import Journal
from loop.models import Exchange, Frame, FrameStatus, ToolCall, ToolCallStatus
from loop.providers.base import AssembledTurn
from loop.sql import events as event_rows
from loop.sql import frames as rows
from loop.store_calls import CANCELED_RESULT, CallLog

# A call in one of these states has no result yet (a running delegate waits for its child).
UNSETTLED = (ToolCallStatus.PLANNED, ToolCallStatus.RUNNING, ToolCallStatus.APPROVED, ToolCallStatus.AWAITING_HUMAN)


class FrameLog:
    """Child frames and the narrative rows that open and close them."""

    def __init__(self, journal: Journal, calls: CallLog) -> None:
        self.journal = journal
        self.calls = calls

    def open(
        self, *, exchange: Exchange, parent: Frame, parent_call_id: int, agent: str, narrative: str, task: str,
        selection: Mapping[str, Any], grant: Mapping[str, Any], principal: str,
    ) -> Frame:
        """Open a child frame one level below ``parent``; its narrative starts with the task.
        ``grant`` (its tools and process grant, :class:`loop.delegation.FrameGrant`) is recorded
        once, in the ``control:frame_opened`` row."""
        with transaction.atomic():
            frame = rows.open_child(session_id=exchange.session_id, exchange_id=exchange.pk, depth=parent.depth + 1,
                                    agent=agent, narrative=narrative, parent_call_id=parent_call_id,
                                    selection=selection, now=self.journal.now())
            opened = {"frame": frame.pk, "depth": frame.depth, "agent": agent, "parent_frame": parent.pk,
                      "parent_call": parent_call_id, "selection": dict(selection), **grant,
                      # the child inherits its parent's taint up to here (loop/provenance.py)
                      "parent_narrative": parent.narrative}
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

    def end_child(
        self, frame: Frame, *, status: str, content: str, subagent: Mapping[str, Any], principal: str,
        exchange: Exchange,
    ) -> None:
        """A child ended (or ended long ago and its result never reached its parent: the un-wedge):
        its frame closes (once) and its spawning call gets the result and the one
        ``subagent_result``, in one transaction."""
        call = frame.parent_call
        assert call is not None, "a child frame has a spawning call"
        with transaction.atomic():
            self._close(frame, outcome=str(subagent.get("outcome", "canceled")), principal=principal,
                        exchange=exchange)
            if call.status in UNSETTLED:
                self.calls.result(call, status=status, content=content, is_error=status != ToolCallStatus.COMPLETED,
                                  truncated=False, principal=principal, narrative=call.frame.narrative,
                                  subagent=subagent)

    def open_children(self, exchange_id: int) -> list[Frame]:
        return rows.open_children(exchange_id)

    def child_of(self, call_id: int) -> Frame | None:
        return rows.child_of(call_id)

    def get(self, frame_id: int) -> Frame:
        return rows.frame_by_id(frame_id)

    def rows_of(self, frame: Frame, *kinds: str) -> list[dict[str, Any]]:
        return rows.narrative_rows(frame, *kinds)

    def cancel_open(
        self, exchange: Exchange, *, reason: str, principal: str,
        then: Callable[[Sequence[int], str], object] | None = None, below: Frame | None = None,
        only: Sequence[Frame] | None = None, spawn_status: str = ToolCallStatus.CANCELED,
    ) -> int:
        """A stop reaches a tree nobody drives (parked, or its worker died): every open child frame,
        deepest first, cancels its unsettled calls (and their pending approvals, through ``then``),
        closes ``canceled`` and gives its spawning call a ``spawn_status`` result with its one
        ``subagent_result``. Inside the caller's transaction or its own. With ``below``, only the
        frames under that one (a child's own stop); with ``only``, those frames and the open frames
        under them (a reaped batch). Returns how many closed."""
        children = rows.open_children(exchange.pk)
        if below is not None and below.depth > 0:
            children = [frame for frame in children if below.pk in rows.ancestors(frame)]
        if only is not None:
            chosen = {frame.pk for frame in only}
            children = [frame for frame in children if frame.pk in chosen or chosen & set(rows.ancestors(frame))]
        with transaction.atomic():
            for frame in children:
                waiting: list[ToolCall] = list(ToolCall.objects.select_related("frame").filter(
                    frame_id=frame.pk, status__in=UNSETTLED).order_by("turn", "index"))
                self.calls.cancel_calls(waiting, reason=reason, principal=principal, then=then)
                text = reason if spawn_status != ToolCallStatus.CANCELED else CANCELED_RESULT.format(reason=reason)
                subagent = {"agent": frame.agent, "content": text, "outcome": "canceled", "frame": frame.pk,
                            "depth": frame.depth, "input_tokens": 0, "output_tokens": 0}
                self.end_child(frame, status=spawn_status, content=text, subagent=subagent,
                               principal=principal, exchange=exchange)
        return len(children)

    def ancestors(self, frame: Frame) -> list[int]:
        return rows.ancestors(frame)

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
