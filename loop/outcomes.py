"""Terminal, typed outcomes of an exchange (SPEC L3). Values, not exceptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

OutcomeName = Literal[
    "completed", "turn_cap_reached", "budget_exceeded", "canceled", "provider_failed", "awaiting_human"
]


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
