"""Terminal, typed outcomes of an exchange (SPEC L3), and their conversion to and from receipts.

Outcomes are values, not exceptions. A settled exchange stores its outcome as a receipt
(:func:`build_receipt`); :func:`outcome_from_receipt` reads the same value back, so no caller parses
a receipt's strings itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, Protocol

from loop.digest import events_digest

OutcomeName = Literal[
    "completed", "turn_cap_reached", "budget_exceeded", "canceled", "provider_failed", "awaiting_human"
]


class CancelCause(StrEnum):
    """Why an exchange ended ``canceled``: products branch on this, never on the reason text."""

    STOP = "stop"  # a user or operator asked it to stop
    CLOSED_BY_HUMAN = "closed_by_human"  # a human answered a handoff with "close"
    WITHDRAWN = "withdrawn"  # whoever asked for the work withdrew it (its async task was cancelled)


@dataclass(frozen=True, slots=True)
class Completed:
    answer: str
    name: OutcomeName = "completed"


@dataclass(frozen=True, slots=True)
class TurnCapReached:
    turns: int
    name: OutcomeName = "turn_cap_reached"


@dataclass(frozen=True, slots=True)
class BudgetExceeded:
    reason: str
    name: OutcomeName = "budget_exceeded"


@dataclass(frozen=True, slots=True)
class Canceled:
    reason: str
    cause: CancelCause = CancelCause.STOP
    name: OutcomeName = "canceled"


@dataclass(frozen=True, slots=True)
class ProviderFailed:
    code: str
    message: str
    name: OutcomeName = "provider_failed"


@dataclass(frozen=True, slots=True)
class AwaitingHuman:
    """A call needs approval or a handoff: the exchange parks durably and resumes later."""

    call_keys: tuple[str, ...] = ()
    question: str = ""
    name: OutcomeName = "awaiting_human"


RunOutcome = Completed | TurnCapReached | BudgetExceeded | Canceled | ProviderFailed | AwaitingHuman
TerminalOutcome = Completed | TurnCapReached | BudgetExceeded | Canceled | ProviderFailed

TERMINAL_NAMES: frozenset[str] = frozenset(
    {"completed", "turn_cap_reached", "budget_exceeded", "canceled", "provider_failed"}
)


@dataclass(frozen=True, slots=True)
class ExchangeResult:
    """What an entry point returns: the exchange, its outcome, and the receipt when settled."""

    exchange_id: int
    outcome: RunOutcome
    receipt: dict[str, Any] | None = None
    replayed: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# --- outcome <-> receipt ----------------------------------------------------------------------


def outcome_detail(outcome: RunOutcome) -> dict[str, Any]:
    """The part of a receipt that only the outcome knows (``detail``): bounded, JSON-ready."""
    match outcome:
        case Completed(answer=answer):
            return {"answer": answer[:2000]}
        case Canceled(reason=reason, cause=cause):
            return {"reason": reason[:500], "cause": cause.value}
        case BudgetExceeded(reason=reason):
            return {"reason": reason}
        case ProviderFailed(code=code, message=message):
            return {"code": code, "message": message[:300]}
        case TurnCapReached(turns=turns):
            return {"turns": turns}
        case AwaitingHuman():
            return {}


def outcome_from_receipt(name: str, receipt: Mapping[str, Any] | None, *, turns: int = 0) -> RunOutcome:
    """The typed outcome a stored exchange ended with (``name`` is its outcome column)."""
    detail = (receipt or {}).get("detail", {})
    match name:
        case "completed":
            return Completed(answer=detail.get("answer", ""))
        case "turn_cap_reached":
            return TurnCapReached(turns=detail.get("turns", turns))
        case "budget_exceeded":
            return BudgetExceeded(reason=detail.get("reason", ""))
        case "canceled":
            return Canceled(reason=detail.get("reason", ""), cause=CancelCause(detail.get("cause", "stop")))
        case "provider_failed":
            return ProviderFailed(code=detail.get("code", ""), message=detail.get("message", ""))
        case _:
            return AwaitingHuman()


class ReceiptSubject(Protocol):
    """What a receipt certifies about an exchange (a stored row, or a row rebuilt by a verifier)."""

    pk: Any
    session_id: Any
    number: int
    request_key: str
    turns: int
    input_tokens: int
    output_tokens: int


def build_receipt(
    exchange: ReceiptSubject, *, outcome: str, events: Sequence[tuple[int, str, Any]], detail: Mapping[str, Any]
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
