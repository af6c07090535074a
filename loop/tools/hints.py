"""Restart hints: what recovery does with a tool call that was in flight when the worker died."""

from __future__ import annotations

from enum import StrEnum


class RestartHint(StrEnum):
    """How a tool declares it may be treated after a crash mid-call (SPEC R, L11).

    ``RERUN`` is for tools that are safe to repeat (pure reads). ``MARK_INTERRUPTED`` is for tools
    with effects outside the loop: recovery records the call as interrupted and never replays it.
    """

    RERUN = "rerun"
    MARK_INTERRUPTED = "mark_interrupted"
