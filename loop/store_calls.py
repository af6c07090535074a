"""The store's tool-call writes: message ends with their planned calls, intents, results, parking."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction

from loop import rows
from loop.digest import arguments_hash, canonical, events_digest
from loop.events import EventKind
from loop.models import (
    Exchange,
    ExchangeStatus,
    Frame,
    Outcome,
    ToolCall,
    ToolCallStatus,
)
from loop.projection import call_key
from loop.providers.base import AssembledTurn
from loop.store_base import StoreBase


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



class CallWrites(StoreBase):
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


def _transition_if(call_id: int, from_status: str, to_status: str, now: Any) -> bool:
    """A conditional state change: exactly one actor moves a call out of ``from_status``."""
    return ToolCall.objects.filter(pk=call_id, status=from_status).update(status=to_status, updated_at=now) == 1
