"""Token budgets (SPEC L15): reserved from the root, one call may overshoot, unknown spend refuses.

One :class:`DispatchAuthority` is owned by the root of an exchange and shared by every child
frame, so a delegate can never dispatch around its parent's budget. What an async task reserved
and did not spend comes back as ``returned_tokens`` (written by the task's ending, never by this
ledger's driver): the ledger's spend is ``spent_tokens - returned_tokens``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field


class BudgetRefused(Exception):
    """Admission refused: the budget is spent, or an earlier call's spend is unknown."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class DispatchAuthority:
    budget_tokens: int | None = None
    spent_tokens: int = 0
    accounting_incomplete: bool = False
    calls: int = 0
    returned_tokens: int = 0
    # Reads what ended tasks gave back since (durable, written by another worker); asked only when
    # the budget looks spent, so the hot path pays nothing.
    returns: Callable[[], int] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def admit(self) -> None:
        """Short admission under the lock; raises :class:`BudgetRefused`."""
        with self._lock:
            if self.accounting_incomplete:
                raise BudgetRefused("accounting_incomplete")
            if self._spent_out():
                raise BudgetRefused("budget_spent")
            self.calls += 1

    def _spent_out(self) -> bool:
        """Whether the budget is spent, after reading back what tasks returned (under the lock)."""
        if self.budget_tokens is None or self.spent_tokens - self.returned_tokens < self.budget_tokens:
            return False
        if self.returns is not None:
            self.returned_tokens = max(self.returned_tokens, self.returns())
        return self.spent_tokens - self.returned_tokens >= self.budget_tokens

    def settle(self, input_tokens: int | None, output_tokens: int | None) -> None:
        """Record a call's actual usage; a call without usage makes the authority refuse from now on."""
        with self._lock:
            if input_tokens is None or output_tokens is None:
                self.accounting_incomplete = True
                return
            self.spent_tokens += input_tokens + output_tokens

    def reserve(self, tokens: int | None) -> int | None:
        """Reserve what a frame spawned to run later (an async task) may spend: ``tokens`` (its own
        bound; None: unbounded) capped at what remains, charged to this ledger now so the tree can
        never spend it twice; what the frame does not spend comes back through ``returns`` when it ends.
        Returns the reservation; None when this ledger has no budget (nothing
        to reserve from: the child runs under its own bound)."""
        with self._lock:
            if self.budget_tokens is None:
                return tokens
            self._spent_out()  # what ended tasks returned is available again
            remaining = max(0, self.budget_tokens - self.spent_tokens + self.returned_tokens)
            granted = remaining if tokens is None else min(tokens, remaining)
            self.spent_tokens += granted
            return granted

    @property
    def exceeded(self) -> bool:
        """Whether the budget is spent (reads back returned reservations first)."""
        with self._lock:
            return self._spent_out()
