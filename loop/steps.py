"""Classifying a finished model turn is pure: what the driver does next, as a typed value."""

from __future__ import annotations

from dataclasses import dataclass

from loop.outcomes import AwaitingHuman, Canceled, Completed, TurnCapReached
from loop.providers.base import AssembledTurn


@dataclass(frozen=True, slots=True)
class Answer:
    """No tool calls: the turn is the answer and the exchange completes."""

    outcome: Completed


@dataclass(frozen=True, slots=True)
class CapReached:
    """Tool calls on the last allowed turn: the group is closed without running anything."""

    outcome: TurnCapReached


@dataclass(frozen=True, slots=True)
class ToolRound:
    """Tool calls to run, then another provider turn (or a park, or a stop)."""


Step = Answer | CapReached | ToolRound


@dataclass(frozen=True, slots=True)
class RunAgain:
    """A tool round ran to its end with nothing waiting: the frame's loop takes its next model turn."""


# What a tool round ends in: the next model turn, the round's waiting calls parked (or kept for one
# park of the tree), or a stop that ended the frame.
RoundEnd = RunAgain | AwaitingHuman | Canceled


def classify_turn(assembled: AssembledTurn, *, turn: int, max_turns: int) -> Step:
    """What follows a finished model turn: the answer, the turn cap, or a tool round.

    This is the only place the turn cap is tested: a turn is dispatched only after a tool round,
    and a tool round only happens below the cap.
    """
    if not assembled.tool_calls:
        return Answer(Completed(answer=assembled.text))
    if turn >= max_turns:
        return CapReached(TurnCapReached(turns=turn))
    return ToolRound()
