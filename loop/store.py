"""The durable store (SPEC L4, L5): the only kernel module that touches the ORM.

Every method that changes state is one transaction that also appends its audit row through the
injected :class:`~loop.ports.AuditSink`; viewers are woken only after commit. Narrative rows are
append-only and exactly-once by idempotency key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from loop import rows
from loop.bounds import PAYLOAD_CAP_BYTES
from loop.digest import arguments_hash, canonical, events_digest
from loop.errors import HarnessError, PersistError
from loop.events import CONVERSATION_KINDS, EventKind
from loop.models import (
    Exchange,
    ExchangeStatus,
    Frame,
    FrameStatus,
    Outcome,
    ScratchpadEntry,
    Session,
    SessionEvent,
    ToolCall,
    ToolCallStatus,
)
from loop.ports import AuditSink, Clock, EventBus
from loop.projection import EventRow, call_key
from loop.providers.base import AssembledTurn

ACTIVE_STATUSES = (ExchangeStatus.OPEN, ExchangeStatus.PARKED)


@dataclass(frozen=True, slots=True)
class Admission:
    exchange: Exchange
    replayed: bool


@dataclass(frozen=True, slots=True)
class ParsedCall:
    key: str
    provider_id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] | None  # None when the raw text is not a JSON object


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Codec check only (SPEC L9 ``validate_calls``): a JSON object, or None."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Store:
    def __init__(
        self, *, audit: AuditSink, clock: Clock, bus: EventBus, payload_cap: int = PAYLOAD_CAP_BYTES
    ) -> None:
        self.audit = audit
        self.clock = clock
        self.bus = bus
        self.payload_cap = payload_cap

    # --- sessions ---------------------------------------------------------------------------

    def create_session(self, *, owner_id: int, agent: str, source: str, title: str, principal: str) -> Session:
        with transaction.atomic():
            session = Session.objects.create(
                owner_id=owner_id, agent=agent, source=source, title=title[:200], created_at=self.clock.now()
            )
            self.audit.append(
                "loop.session.created", principal=principal, subject_type="session", subject_id=str(session.pk),
                payload={"agent": agent, "source": source},
            )
        return session

    # --- narrative --------------------------------------------------------------------------

    def _append(
        self,
        session_id: int,
        kind: str,
        payload: Mapping[str, Any],
        key: str,
        *,
        exchange_id: int | None = None,
        narrative: str = "",
    ) -> int:
        """Append one row inside the caller's transaction and return its seq. An exact repeat of
        ``key`` returns the stored row's seq; the same key with other content refuses."""
        assert connection.in_atomic_block, "narrative rows are appended inside a transaction"
        body = canonical(payload)
        if len(body.encode("utf-8")) > self.payload_cap:
            raise PersistError(
                f"{kind} payload is {len(body.encode())} bytes, over the {self.payload_cap}-byte cap",
                code="payload_too_large",
            )
        with connection.cursor() as cursor:
            seq, inserted = rows.append_event(cursor, session_id=session_id, exchange_id=exchange_id, kind=kind,
                                              narrative=narrative, body=body, key=key, created_at=self.clock.now())
            if seq is None:
                raise PersistError(f"session {session_id} does not exist", code="session_missing")
            if inserted:
                return seq
            # The key is stored already: an exact repeat returns that row, anything else refuses.
            rows.give_back_seq(cursor, session_id)
            existing = rows.find_event(cursor, key)
        assert existing is not None
        if existing[1] != kind or canonical(existing[2]) != body:
            raise PersistError(f"idempotency key {key} reused with other content", code="idempotency_conflict")
        return existing[0]

    def _wake(self, session_id: int, last_seq: int) -> None:
        """Wake the session's viewers once the transaction commits (never before: a viewer must
        find the rows it is woken for)."""
        transaction.on_commit(lambda: self.bus.committed(session_id, last_seq))

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
            seq = self._append(session_id, kind, payload, key, exchange_id=exchange_id, narrative=narrative)
            self.audit.append(
                "loop.event.appended", principal=principal, subject_type="session", subject_id=str(session_id),
                payload={"seq": seq, "kind": kind, "digest": events_digest([(seq, kind, payload)])},
            )
            self._wake(session_id, seq)
        return SessionEvent.objects.get(session_id=session_id, seq=seq)

    def replay(
        self, session_id: int, *, narrative: str = "", cap: int, after_seq: int = 0
    ) -> tuple[list[EventRow], bool]:
        """The last ``cap`` conversation rows of a narrative (after ``after_seq``), oldest first, and
        whether older rows were cut off."""
        with connection.cursor() as cursor:
            fetched = rows.conversation_rows(cursor, session_id=session_id, narrative=narrative,
                                             kinds=CONVERSATION_KINDS, after_seq=after_seq, limit=cap + 1)
        capped = len(fetched) > cap
        window = [EventRow(seq=seq, kind=kind, payload=payload, narrative=narrative)
                  for seq, kind, payload in fetched[:cap]]
        window.reverse()
        return window, capped

    def events_after(self, session_id: int, after: int, limit: int) -> list[SessionEvent]:
        return list(SessionEvent.objects.filter(session_id=session_id, seq__gt=after).order_by("seq")[:limit])

    # --- exchanges ------------------------------------------------------------------------------

    def admit(
        self,
        *,
        session_id: int,
        request_key: str,
        content: str,
        principal: str,
        config: Mapping[str, Any],
        author: str = "",
        claim_token: str = "",
    ) -> Admission:
        """Admit a request idempotently (SPEC L4): an exact retry returns the stored exchange and
        writes nothing; another active exchange on the session refuses. With ``claim_token`` the
        new exchange is claimed in the same transaction (an in-process driver)."""
        try:
            with transaction.atomic():
                session = Session.objects.select_for_update().only("agent", "exchange_count").get(pk=session_id)
                clash = (Exchange.objects.filter(session_id=session_id)
                         .filter(Q(request_key=request_key) | Q(status__in=ACTIVE_STATUSES))
                         .order_by("-number").first())
                if clash is not None and clash.request_key == request_key:
                    return Admission(clash, replayed=True)
                if clash is not None:
                    code = "session_awaiting_human" if clash.status == ExchangeStatus.PARKED else "session_busy"
                    raise HarnessError(f"exchange e{clash.number} of this session is still {clash.status}", code=code)
                number = session.exchange_count + 1
                Session.objects.filter(pk=session_id).update(exchange_count=number)
                now = self.clock.now()
                exchange = Exchange.objects.create(
                    session_id=session_id, number=number, request_key=request_key, input=content,
                    status=ExchangeStatus.OPEN, config=dict(config), created_at=now,
                    budget_tokens=config.get("budget_tokens"), claim_token=claim_token,
                    claimed_at=now if claim_token else None,
                )
                exchange.root = Frame.objects.create(  # type: ignore[attr-defined]
                    session_id=session_id, exchange=exchange, depth=0, agent=session.agent, created_at=now
                )
                payload = {"content": content, "author": author}
                seq = self._append(session_id, EventKind.USER, payload, f"s{session_id}:e{number}:user",
                                   exchange_id=exchange.pk)
                self.audit.append(
                    "loop.exchange.admitted", principal=principal, subject_type="exchange",
                    subject_id=str(exchange.pk),
                    payload={"session": session_id, "number": number, "request_key": request_key,
                             "seq": seq, "digest": events_digest([(seq, EventKind.USER, payload)])},
                )
                self._wake(session_id, seq)
        except IntegrityError:
            # A concurrent admission with the same key won the race: this is an exact retry.
            existing = Exchange.objects.filter(session_id=session_id, request_key=request_key).first()
            if existing is None:
                raise
            return Admission(existing, replayed=True)
        return Admission(exchange, replayed=False)

    def claim(self, exchange_id: int, token: str) -> bool:
        """Claim an open exchange for one driver; a second driver gets False (no double driving).
        The driver that claimed it at admission keeps it."""
        with transaction.atomic():
            claimed = Exchange.objects.filter(pk=exchange_id, status=ExchangeStatus.OPEN).filter(
                Q(claim_token="") | Q(claim_token=token)
            ).update(claim_token=token, claimed_at=self.clock.now())
        return claimed == 1

    def release(self, exchange_id: int, token: str) -> None:
        Exchange.objects.filter(pk=exchange_id, claim_token=token).update(claim_token="")

    def reopen(self, exchange: Exchange, *, principal: str, reason: str) -> bool:
        """A parked exchange becomes open again (its approvals are answered) for a new driver."""
        with transaction.atomic():
            changed = Exchange.objects.filter(pk=exchange.pk, status=ExchangeStatus.PARKED).update(
                status=ExchangeStatus.OPEN, outcome="", claim_token=""
            )
            if changed:
                self.audit.append(
                    "loop.exchange.resumed", principal=principal, subject_type="exchange",
                    subject_id=str(exchange.pk), payload={"reason": reason},
                )
        return changed == 1

    def root_frame(self, exchange: Exchange) -> Frame:
        frame = getattr(exchange, "root", None)
        return frame if frame is not None else Frame.objects.get(exchange=exchange, depth=0)

    def request_cancel(self, exchange_id: int, *, principal: str) -> bool:
        """Record a stop request (sticky); the driving worker sees it within its poll interval."""
        with transaction.atomic():
            changed = Exchange.objects.filter(
                pk=exchange_id, cancel_requested_at__isnull=True, status__in=ACTIVE_STATUSES
            ).update(cancel_requested_at=self.clock.now())
            if changed:
                self.audit.append(
                    "loop.exchange.cancel_requested", principal=principal, subject_type="exchange",
                    subject_id=str(exchange_id), payload={},
                )
        return changed == 1

    def cancel_requested(self, exchange_id: int) -> bool:
        return Exchange.objects.filter(pk=exchange_id, cancel_requested_at__isnull=False).exists()

    # --- turns and tool calls ---------------------------------------------------------------------

    def record_message_end(
        self,
        *,
        exchange: Exchange,
        frame: Frame,
        turn: int,
        assembled: AssembledTurn,
        principal: str,
        spent_tokens: int,
        journal: int = 0,
    ) -> list[tuple[ToolCall, ParsedCall]]:
        """Persist the assistant turn and its planned calls (message end, SPEC L1).

        ``journal`` calls (the first ones of the round) also get their ``control:tool_intent`` in
        this transaction: nothing happens between the message end and their intent but the gate.
        """
        with transaction.atomic():
            calls = self._message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            for call, _parsed in calls[:journal]:
                self._intent(call, principal=principal, narrative=frame.narrative)
        return calls

    def _message_end(
        self, exchange: Exchange, frame: Frame, turn: int, assembled: AssembledTurn, principal: str, spent: int
    ) -> list[tuple[ToolCall, ParsedCall]]:
        number = exchange.number
        parsed = [
            ParsedCall(
                key=call_key(number, turn, index), provider_id=call.id, name=call.name,
                raw_arguments=call.arguments, arguments=parse_arguments(call.arguments),
            )
            for index, call in enumerate(assembled.tool_calls)
        ]
        payload = {
            "content": assembled.text,
            "tool_calls": [
                {"key": c.key, "id": c.provider_id, "name": c.name, "arguments": c.raw_arguments} for c in parsed
            ],
            "turn": turn,
            "finish_reason": assembled.finish_reason or "stop",
            "input_tokens": assembled.input_tokens,
            "output_tokens": assembled.output_tokens,
        }
        now = self.clock.now()
        seq = self._append(
            exchange.session_id, EventKind.ASSISTANT, payload,
            f"s{exchange.session_id}:{frame.narrative}e{number}:t{turn}:assistant",
            exchange_id=exchange.pk, narrative=frame.narrative,
        )
        calls: list[tuple[ToolCall, ParsedCall]] = []
        with connection.cursor() as cursor:
            for index, c in enumerate(parsed):
                arguments = c.arguments if c.arguments is not None else {}
                digest = arguments_hash(c.arguments if c.arguments is not None else c.raw_arguments)
                values = [exchange.session_id, exchange.pk, frame.pk, turn, index, c.key, c.provider_id[:128],
                          c.name[:128], canonical(arguments), digest, ToolCallStatus.PLANNED, now]
                call = ToolCall(
                    id=rows.insert_tool_call(cursor, values), session_id=exchange.session_id,
                    exchange_id=exchange.pk, frame_id=frame.pk, turn=turn, index=index, call_key=c.key,
                    provider_call_id=c.provider_id[:128], tool=c.name[:128], arguments=arguments,
                    arguments_hash=digest, status=ToolCallStatus.PLANNED, created_at=now, updated_at=now,
                )
                call._state.adding = False
                calls.append((call, c))
            rows.count_turn(cursor, exchange.pk, input_tokens=assembled.input_tokens or 0,
                            output_tokens=assembled.output_tokens or 0, spent=spent,
                            incomplete=not assembled.has_usage)
        self.audit.append(
            "loop.turn.ended", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
            payload={"turn": turn, "seq": seq, "calls": [c.key for c in parsed],
                     "digest": events_digest([(seq, EventKind.ASSISTANT, payload)])},
        )
        self._wake(exchange.session_id, seq)
        return calls

    def finish_turn(
        self,
        *,
        exchange: Exchange,
        frame: Frame,
        turn: int,
        assembled: AssembledTurn,
        principal: str,
        spent_tokens: int,
        outcome: str,
        detail: Mapping[str, Any],
    ) -> dict[str, Any]:
        """A tool-free last turn: its message end and the settlement commit together."""
        with transaction.atomic():
            self._message_end(exchange, frame, turn, assembled, principal, spent_tokens)
            return self._settle(exchange, outcome=outcome, principal=principal, detail=detail)

    def record_intent(self, call: ToolCall, *, principal: str, narrative: str = "") -> None:
        """Journal ``control:tool_intent`` and mark the call running, before it executes (SPEC L9)."""
        with transaction.atomic():
            self._intent(call, principal=principal, narrative=narrative)

    def _intent(self, call: ToolCall, *, principal: str, narrative: str) -> None:
        payload = {"key": call.call_key, "name": call.tool, "arguments_hash": call.arguments_hash}
        seq = self._append(call.session_id, EventKind.TOOL_INTENT, payload,
                           f"s{call.session_id}:{narrative}{call.call_key}:intent",
                           exchange_id=call.exchange_id, narrative=narrative)
        self._transition(call, ToolCallStatus.RUNNING, principal=principal, extra={"seq": seq})
        self._wake(call.session_id, seq)

    def record_result(
        self,
        call: ToolCall,
        *,
        status: str,
        content: str,
        is_error: bool,
        truncated: bool,
        principal: str,
        narrative: str = "",
    ) -> None:
        """Append ``tool_result`` + ``control:tool_done`` and settle the call's state."""
        result = {"key": call.call_key, "name": call.tool, "content": content, "is_error": is_error,
                  "status": status, "truncated": truncated}
        with transaction.atomic():
            first = self._append(call.session_id, EventKind.TOOL_RESULT, result,
                                 f"s{call.session_id}:{narrative}{call.call_key}:result",
                                 exchange_id=call.exchange_id, narrative=narrative)
            done = self._append(call.session_id, EventKind.TOOL_DONE, {"key": call.call_key, "status": status},
                                f"s{call.session_id}:{narrative}{call.call_key}:done",
                                exchange_id=call.exchange_id, narrative=narrative)
            call.result = content
            call.is_error = is_error
            self._transition(call, status, principal=principal,
                             extra={"seq": first, "digest": events_digest([(first, EventKind.TOOL_RESULT, result)])})
            self._wake(call.session_id, done)

    def _transition(self, call: ToolCall, status: str, *, principal: str, extra: Mapping[str, Any]) -> None:
        previous = call.status
        call.status = status
        call.updated_at = self.clock.now()
        with connection.cursor() as cursor:
            rows.set_call_state(cursor, call.pk, status=status, result=call.result, is_error=call.is_error,
                                now=call.updated_at)
        self.audit.append(
            "loop.tool_call.transition", principal=principal, subject_type="tool_call", subject_id=str(call.pk),
            payload={"key": call.call_key, "tool": call.tool, "from": previous, "to": status,
                     "arguments_hash": call.arguments_hash, **extra},
        )

    def park(
        self,
        exchange: Exchange,
        parked: Sequence[tuple[ToolCall, Callable[[], Mapping[str, Any]]]],
        *,
        principal: str,
        question: str = "",
    ) -> None:
        """Park calls awaiting a human (SPEC A3): each ``park`` callback writes its durable approval
        in this same transaction; the exchange ends AwaitingHuman and no worker waits."""
        with transaction.atomic():
            keys = []
            for call, park in parked:
                detail = dict(park())
                self._transition(call, ToolCallStatus.AWAITING_HUMAN, principal=principal, extra={})
                self._append(
                    call.session_id, EventKind.APPROVAL_REQUESTED,
                    {"key": call.call_key, "name": call.tool, "tool_call_id": call.pk, **detail},
                    f"s{call.session_id}:{call.call_key}:approval:{call.updated_at.timestamp()}",
                    exchange_id=exchange.pk,
                )
                keys.append(call.call_key)
            Exchange.objects.filter(pk=exchange.pk).update(
                status=ExchangeStatus.PARKED, outcome=Outcome.AWAITING_HUMAN, claim_token=""
            )
            seq = self._append(
                exchange.session_id, EventKind.EXCHANGE_PARKED, {"calls": keys, "question": question},
                f"s{exchange.session_id}:e{exchange.number}:parked:{len(keys)}:{self.clock.now().timestamp()}",
                exchange_id=exchange.pk,
            )
            self.audit.append(
                "loop.exchange.parked", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
                payload={"calls": keys, "question": question[:500]},
            )
            self._wake(exchange.session_id, seq)
        exchange.status, exchange.outcome, exchange.claim_token = ExchangeStatus.PARKED, Outcome.AWAITING_HUMAN, ""

    def settle(
        self, exchange: Exchange, *, outcome: str, principal: str, detail: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Settle a terminal outcome (RunEnd): the receipt certifies every write of the exchange.

        Updates ``exchange`` in place (status, outcome, receipt, counters).
        """
        with transaction.atomic():
            return self._settle(exchange, outcome=outcome, principal=principal, detail=detail)

    def _settle(
        self, exchange: Exchange, *, outcome: str, principal: str, detail: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        assert connection.in_atomic_block, "settle runs inside the caller's transaction"
        if outcome == Outcome.CANCELED:
            self._append(exchange.session_id, EventKind.CANCELED, {"reason": (detail or {}).get("reason", "")},
                         f"s{exchange.session_id}:e{exchange.number}:canceled", exchange_id=exchange.pk)
        # The end marker viewers follow: every outcome, not only the ones with a message.
        last = self._append(exchange.session_id, EventKind.EXCHANGE_SETTLED, {"outcome": outcome},
                            f"s{exchange.session_id}:e{exchange.number}:settled", exchange_id=exchange.pk)
        now = self.clock.now()
        with connection.cursor() as cursor:
            lock = " FOR UPDATE" if connection.vendor == "postgresql" else ""
            cursor.execute(f"SELECT turns, input_tokens, output_tokens FROM loop_exchange WHERE id = %s{lock}",
                           [exchange.pk])
            exchange.turns, exchange.input_tokens, exchange.output_tokens = cursor.fetchone()
            events = rows.exchange_events(cursor, exchange.pk)
            receipt = build_receipt(exchange, outcome=outcome, events=events, detail=detail or {})
            cursor.execute(
                "UPDATE loop_exchange SET status = %s, outcome = %s, receipt = " + rows.json_param()
                + ", claim_token = '', settled_at = %s WHERE id = %s",
                [ExchangeStatus.SETTLED, outcome, canonical(receipt), rows.when(now), exchange.pk],
            )
            cursor.execute(
                "UPDATE loop_frame SET status = %s, outcome = %s, closed_at = %s WHERE exchange_id = %s "
                "AND status = %s", [FrameStatus.CLOSED, outcome, rows.when(now), exchange.pk, FrameStatus.OPEN],
            )
        self.audit.append(
            "loop.exchange.settled", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
            payload={"outcome": outcome, "receipt_digest": receipt["digest"], "last_seq": receipt["last_seq"]},
        )
        self._wake(exchange.session_id, last)
        exchange.status, exchange.outcome, exchange.receipt = ExchangeStatus.SETTLED, outcome, receipt
        exchange.claim_token, exchange.settled_at = "", now
        return receipt

    def mark_broken(self, exchange: Exchange, *, code: str, message: str, principal: str) -> None:
        """A partial write or a breach: keep the claim and refuse retry (no silent repair, SPEC L5)."""
        with transaction.atomic():
            Exchange.objects.filter(pk=exchange.pk).update(status=ExchangeStatus.BROKEN, error_code=code[:64])
            self.audit.append(
                "loop.exchange.broken", principal=principal, subject_type="exchange", subject_id=str(exchange.pk),
                payload={"code": code, "message": message[:300]},
            )

    def take_awaiting(self, call: ToolCall, *, to_status: str, principal: str) -> bool:
        """Move a call out of awaiting_human exactly once (a second resolver gets False)."""
        with transaction.atomic():
            if not _transition_if(call.pk, ToolCallStatus.AWAITING_HUMAN, to_status, self.clock.now()):
                return False
            call.refresh_from_db()
            self.audit.append(
                "loop.tool_call.transition", principal=principal, subject_type="tool_call", subject_id=str(call.pk),
                payload={"key": call.call_key, "tool": call.tool, "from": ToolCallStatus.AWAITING_HUMAN,
                         "to": to_status, "arguments_hash": call.arguments_hash},
            )
        return True

    def awaiting_calls(self, exchange_id: int) -> int:
        return ToolCall.objects.filter(exchange_id=exchange_id, status=ToolCallStatus.AWAITING_HUMAN).count()

    # --- scratchpad ---------------------------------------------------------------------------------

    def scratchpad_set(self, session_id: int, key: str, value: str, *, principal: str) -> None:
        with transaction.atomic():
            ScratchpadEntry.objects.update_or_create(
                session_id=session_id, key=key, defaults={"value": value, "updated_at": self.clock.now()}
            )
            self.audit.append(
                "loop.scratchpad.set", principal=principal, subject_type="session", subject_id=str(session_id),
                payload={"key": key, "bytes": len(value.encode("utf-8"))},
            )

    def scratchpad_get(self, session_id: int, key: str) -> str | None:
        return ScratchpadEntry.objects.filter(session_id=session_id, key=key).values_list("value", flat=True).first()


def build_receipt(
    exchange: Exchange, *, outcome: str, events: Sequence[tuple[int, str, Any]], detail: Mapping[str, Any]
) -> dict[str, Any]:
    """The receipt of a settled exchange; replay-verify recomputes it from the stored rows."""
    return {
        "exchange": exchange.pk,
        "session": exchange.session_id,
        "number": exchange.number,
        "request_key": exchange.request_key,
        "outcome": outcome,
        "turns": exchange.turns,
        "input_tokens": exchange.input_tokens,
        "output_tokens": exchange.output_tokens,
        "events": len(events),
        "first_seq": events[0][0] if events else None,
        "last_seq": events[-1][0] if events else None,
        "digest": events_digest(events),
        "detail": dict(detail),
    }


def _transition_if(call_id: int, from_status: str, to_status: str, now: Any) -> bool:
    """A conditional state change: exactly one actor moves a call out of ``from_status``."""
    return ToolCall.objects.filter(pk=call_id, status=from_status).update(status=to_status, updated_at=now) == 1
