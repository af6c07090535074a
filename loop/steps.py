"""Classifying a model turn is pure: what the driver does next, as a typed value."""

from __future__ import annotations

from dataclasses import dataclass

from loop.outcomes import Completed, RunOutcome, TurnCapReached
from loop.providers.base import AssembledTurn


@dataclass(frozen=True, slots=True)
class RunAgain:
    """Tool calls to execute, then another provider turn."""


@dataclass(frozen=True, slots=True)
class FinalStep:
    outcome: RunOutcome
    cap_reached: bool = False


@dataclass(frozen=True, slots=True)
class ParkStep:
    call_keys: tuple[str, ...]


Step = RunAgain | FinalStep | ParkStep


def classify_turn(assembled: AssembledTurn, *, turn: int, max_turns: int) -> Step:
    """What follows a finished model turn: the answer, the turn cap, or a tool round."""
    if not assembled.tool_calls:
        return FinalStep(Completed(answer=assembled.text))
    if turn >= max_turns:
        return FinalStep(TurnCapReached(turns=turn), cap_reached=True)
    return RunAgain()
