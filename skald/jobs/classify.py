"""The one classification of a job run's ending: ``succeeded | failed | refused | cancelled``.

Pure, and keyed on the kernel's typed outcome: a cancellation is the ``Canceled`` outcome, never a
message that happens to say "cancel". Everything else that is not a completed answer is a failure
(turn cap, budget, provider failure, a worker lost, a crash) and carries a reason for the prose the
parent receives.
"""

from __future__ import annotations

from dataclasses import dataclass

from loop.admission import InputRefused
from loop.outcomes import BudgetExceeded, Canceled, Completed, ProviderFailed, RunOutcome, TurnCapReached
from skald.jobs.models import RunEnding


@dataclass(frozen=True, slots=True)
class Ending:
    status: str  # a RunEnding value other than ``running``
    outcome: str  # the kernel outcome name, or ``error`` for a crash
    reason: str  # why, for a failure or a cancellation; empty on success


def classify(outcome: RunOutcome) -> Ending:
    """A finished run's kernel outcome → its ending. ``AwaitingHuman`` is not an ending: refuse it."""
    match outcome:
        case Completed():
            return Ending(RunEnding.SUCCEEDED, outcome.name, "")
        case Canceled(reason=reason):
            return Ending(RunEnding.CANCELLED, outcome.name, reason or "cancelled")
        case TurnCapReached(turns=turns):
            return Ending(RunEnding.FAILED, outcome.name, f"the turn cap was reached after {turns} turns")
        case BudgetExceeded(reason=reason):
            return Ending(RunEnding.FAILED, outcome.name, f"the token budget was exceeded ({reason})")
        case ProviderFailed(code=code, message=message):
            return Ending(RunEnding.FAILED, outcome.name, f"the model provider failed ({code}): {message[:200]}")
    raise ValueError(f"{outcome.name} is not an ending")


def refused(error: InputRefused) -> Ending:
    """A run whose input was refused before it ran. The refusal names the rules it matched, never
    the text that matched them."""
    return Ending(RunEnding.REFUSED, "refused", str(error)[:300])


def crashed(error: BaseException | str) -> Ending:
    """A run that raised (or whose worker was lost) instead of reaching an outcome."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return Ending(RunEnding.FAILED, "error", text[:300])
