"""Classifying a model turn is pure: what the driver does next, as a typed value."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


def classify_turn(assembled: AssembledTurn, calls: Sequence[Any], *, turn: int, max_turns: int) -> Step:
    if not calls:
        return FinalStep(Completed(answer=assembled.text))
    if turn >= max_turns:
        return FinalStep(TurnCapReached(turns=turn), cap_reached=True)
    return RunAgain()
