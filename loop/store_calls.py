"""The store's tool-call writes: message ends with their planned calls, intents, results, cancellation.

A call moves ``planned → running → completed | failed | rejected | cancelled | interrupted``, or
``→ awaiting_human`` and on once a human answers; every move is one audited transition.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from loop import sql
from loop.digest import arguments_hash, canonical, events_digest
from loop.events import EventKind
from loop.journal import Journal
from loop.models import TERMINAL_TOOL_CALL_STATUSES, Exchange, Frame, ToolCall, ToolCallStatus
from loop.projection import call_key
from loop.provenance import TRUSTED, UNTRUSTED, EventRowView
from loop.providers.base import AssembledTurn
from loop.sql import calls as call_rows
from loop.sql import events as event_rows
from loop.sql import exchanges as exchange_rows


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


def parsed_from_row(call: ToolCall) -> ParsedCall:
    """A stored call as the tool pipeline takes it (a resumed or recovered call)."""
    return ParsedCall(key=call.call_key, provider_id=call.provider_call_id, name=call.tool, raw_arguments="",
                      arguments=dict(call.arguments))


CANCELED_RESULT = "tool call canceled: {reason}"


class CallLog:
    """Tool-call rows and the narrative rows that go with them."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def message_end(
        self, exchange: Exchange, frame: Frame, turn: int, assembled: AssembledTurn, principal: str, spent: int
    ) -> list[tuple[ToolCall, ParsedCall]]:
        """The assistant row and its planned calls, inside the caller's transaction (SPEC L1)."""
        number = exchange.number
        parsed = [
            ParsedCall(key=call_key(number, turn, index), provider_id=call.id, name=call.name,
                       raw_arguments=call.arguments, arguments=parse_arguments(call.arguments))
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
        if assembled.duration_ms is not None:
            payload["duration_ms"] = assembled.duration_ms
        now = self.journal.now()
        seq = self.journal.append(
            exchange.session_id, EventKind.ASSISTANT, payload,
            f"s{exchange.session_id}:{frame.narrative}e{number}:t{turn}:assistant",
            exchange_id=exchange.pk, narrative=frame.narrative, fresh=True,  # the turn was counted with it
        )
        calls: list[tuple[ToolCall, ParsedCall]] = []
        with sql.cursor() as cursor:
            for index, c in enumerate(parsed):
                arguments = c.arguments if c.arguments is not None else {}
                digest = arguments_hash(c.arguments if c.arguments is not None else c.raw_arguments)
                values = [exchange.session_id, exchange.pk, frame.pk, turn, index, c.key, c.provider_id[:128],
                          c.name[:128], canonical(arguments), digest, ToolCallStatus.PLANNED, now]
                call = ToolCall(
                    id=call_rows.insert_tool_call(cursor, values), session_id=exchange.session_id,
                    exchange_id=exchange.pk, frame_id=frame.pk, turn=turn, index=index, call_key=c.key,
                    provider_call_id=c.provider_id[:128], tool=c.name[:128], arguments=arguments,
                    arguments_hash=digest, status=ToolCallStatus.PLANNED, created_at=now, updated_at=now,
                )
                call._state.adding = False
                calls.append((call, c))
        self.journal.write(exchange_rows.count_turn(exchange.pk, input_tokens=assembled.input_tokens or 0,
                                                    output_tokens=assembled.output_tokens or 0, spent=spent,
                                                    incomplete=not assembled.has_usage))
        self.journal.audit(
            "loop.turn.ended", principal=principal, subject_type="exchange", subject_id=exchange.pk,
            payload={"turn": turn, "seq": seq, "calls": [c.key for c in parsed],
                     "digest": events_digest([(seq, EventKind.ASSISTANT, payload)])},
        )
        self.journal.wake(exchange.session_id, seq)
        return calls

    def intent(self, call: ToolCall, *, principal: str, narrative: str) -> None:
        """``control:tool_intent`` and the move to running, inside the caller's transaction."""
        payload = {"key": call.call_key, "name": call.tool, "arguments_hash": call.arguments_hash}
        seq = self.journal.append(call.session_id, EventKind.TOOL_INTENT, payload,
                                  f"s{call.session_id}:{narrative}{call.call_key}:intent",
                                  exchange_id=call.exchange_id, narrative=narrative,
                                  fresh=call.status == ToolCallStatus.PLANNED)  # else it may be journaled
        self.transition(call, ToolCallStatus.RUNNING, principal=principal, extra={"seq": seq})
        self.journal.wake(call.session_id, seq)

    def record_intent(self, call: ToolCall, *, principal: str, narrative: str = "") -> None:
        """Journal ``control:tool_intent`` and mark the call running, before it executes (SPEC L9)."""
        with self.journal.batch():
            self.intent(call, principal=principal, narrative=narrative)

    def result(
        self, call: ToolCall, *, status: str, content: str, is_error: bool, truncated: bool, principal: str,
        narrative: str, withheld: Sequence[str] = (), subagent: Mapping[str, Any] | None = None,
        trust: str = TRUSTED, trust_reason: str = "", suspects: Sequence[Mapping[str, Any]] = (),
    ) -> int:
        """``tool_result`` + ``control:tool_done`` and the call's final state, inside the caller's
        transaction. Returns the seq of the done row.

        ``withheld`` names the credential kinds that kept the output out (SPEC L16); they go into
        the call's transition audit row.
        """
        payload: dict[str, Any] = {"key": call.call_key, "name": call.tool, "content": content,
                                   "is_error": is_error, "status": status, "truncated": truncated}
        if subagent is not None and subagent.get("trust") == UNTRUSTED:  # a child's taint (loop/provenance.py)
            trust, trust_reason = UNTRUSTED, trust_reason or "the sub-agent's frame was tainted"
        if trust == UNTRUSTED:  # trusted rows keep their shape (and digests) from before provenance
            payload["trust"] = UNTRUSTED
            if trust_reason:
                payload["trust_reason"] = trust_reason
        fresh = call.status not in TERMINAL_TOOL_CALL_STATUSES  # a result commits with the call's final state
        first = self.journal.append(call.session_id, EventKind.TOOL_RESULT, payload,
                                    f"s{call.session_id}:{narrative}{call.call_key}:result",
                                    exchange_id=call.exchange_id, narrative=narrative, fresh=fresh)
        for index, suspect in enumerate(suspects if trust == UNTRUSTED else ()):
            self.journal.append(call.session_id, EventKind.INJECTION_SUSPECT,
                                {"result_seq": first, "key": call.call_key, "tool": call.tool, **suspect},
                                f"s{call.session_id}:{narrative}{call.call_key}:suspect{index}",
                                exchange_id=call.exchange_id, narrative=narrative, fresh=fresh)
        done = self.journal.append(call.session_id, EventKind.TOOL_DONE, {"key": call.call_key, "status": status},
                                   f"s{call.session_id}:{narrative}{call.call_key}:done",
                                   exchange_id=call.exchange_id, narrative=narrative, fresh=fresh)
        if subagent is not None:  # a delegate's one subagent_result, with its call's result
            done = self.journal.append(call.session_id, EventKind.SUBAGENT_RESULT, {"key": call.call_key, **subagent},
                                       f"s{call.session_id}:{narrative}{call.call_key}:subagent",
                                       exchange_id=call.exchange_id, narrative=narrative)
        call.result = content
        call.is_error = is_error
        extra: dict[str, Any] = {"seq": first, "digest": events_digest([(first, EventKind.TOOL_RESULT, payload)])}
        if withheld:
            extra["tripwires"] = list(withheld)
        self.transition(call, status, principal=principal, extra=extra)
        self.journal.wake(call.session_id, done)
        return done

    def record_result(
        self, call: ToolCall, *, status: str, content: str, is_error: bool, truncated: bool, principal: str,
        narrative: str = "", withheld: Sequence[str] = (), subagent: Mapping[str, Any] | None = None,
        trust: str = TRUSTED, trust_reason: str = "", suspects: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Append ``tool_result`` + ``control:tool_done`` (and a delegate's ``subagent_result``) and
        settle the call's state. An untrusted result carries its label and its suspected
        instructions (``control:injection_suspect`` rows) in the same transaction."""
        with self.journal.batch():
            self.result(call, status=status, content=content, is_error=is_error, truncated=truncated,
                        principal=principal, narrative=narrative, withheld=withheld, subagent=subagent,
                        trust=trust, trust_reason=trust_reason, suspects=suspects)

    def provenance_rows(self, session_id: int) -> list[EventRowView]:
        """The session's rows provenance is computed from (labelled results, provenance, suspects)."""
        with sql.cursor() as cursor:
            return [EventRowView(*row) for row in event_rows.provenance_rows(cursor, session_id)]

    def record_provenance(self, call: ToolCall, provenance: Mapping[str, Any], *, narrative: str) -> int:
        """``control:provenance``: a call made in a tainted frame, durable before the gate sees it."""
        with self.journal.batch():
            seq = self.journal.append(call.session_id, EventKind.PROVENANCE, {"key": call.call_key, **provenance},
                                      f"s{call.session_id}:{narrative}{call.call_key}:provenance",
                                      exchange_id=call.exchange_id, narrative=narrative)
            self.journal.wake(call.session_id, seq)
        return seq

    def cancel_calls(
        self,
        calls: Sequence[ToolCall],
        *,
        reason: str,
        principal: str,
        narrative: str | None = None,
        then: Callable[[Sequence[int], str], object] | None = None,
    ) -> int:
        """The one way a call ends ``canceled``: a model-visible result that says why, audited.

        Used for a stop, for calls left over when the turn cap is reached, and for a handoff a
        human closed. ``narrative`` defaults to each call's own frame; ``then(call_ids, principal)``
        runs in the same transaction (the product cancels the calls' pending approvals there).
        Returns how many were canceled.
        """
        with self.journal.batch():
            for call in calls:
                self.result(call, status=ToolCallStatus.CANCELED, content=CANCELED_RESULT.format(reason=reason),
                            is_error=True, truncated=False, principal=principal,
                            narrative=call.frame.narrative if narrative is None else narrative)
            if then is not None and calls:
                self.journal.flush_rows()  # the product's callback reads the calls' rows as they are now
                then([call.pk for call in calls], principal)
        return len(calls)

    def transition(self, call: ToolCall, status: str, *, principal: str, extra: Mapping[str, Any]) -> None:
        previous = call.status
        call.status = status
        call.updated_at = self.journal.now()
        self.journal.write(call_rows.set_call_state(call.pk, status=status, result=call.result,
                                                    is_error=call.is_error, now=call.updated_at))
        self.journal.audit(
            "loop.tool_call.transition", principal=principal, subject_type="tool_call", subject_id=call.pk,
            payload={"key": call.call_key, "tool": call.tool, "from": previous, "to": status,
                     "arguments_hash": call.arguments_hash, **extra},
        )

    def take_awaiting(self, call: ToolCall, *, to_status: str, principal: str) -> bool:
        """Move a call out of awaiting_human exactly once (a second resolver gets False)."""
        with transaction.atomic():
            if not call_rows.transition_if(call.pk, ToolCallStatus.AWAITING_HUMAN, to_status, self.journal.now()):
                return False
            call.refresh_from_db()
            self.journal.audit(
                "loop.tool_call.transition", principal=principal, subject_type="tool_call", subject_id=call.pk,
                payload={"key": call.call_key, "tool": call.tool, "from": ToolCallStatus.AWAITING_HUMAN,
                         "to": to_status, "arguments_hash": call.arguments_hash},
            )
        return True

    def awaiting_calls(self, exchange_id: int) -> int:
        return call_rows.count_in_state(exchange_id, ToolCallStatus.AWAITING_HUMAN)

    def calls_in(self, exchange_id: int, *statuses: str) -> list[ToolCall]:
        """An exchange's calls in ``statuses`` (with their frames), oldest first."""
        return call_rows.calls_in_states(exchange_id, statuses)

    def call(self, call_id: int) -> ToolCall:
        return call_rows.call_by_id(call_id)
