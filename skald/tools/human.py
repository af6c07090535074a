"""``ask_human``: the troubleshooter's way out when stuck. Its AskHuman verdict parks the run as a
handoff; an operator answers (continue, with a note) or closes it (SPEC W4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.errors import HumanNeeded
from loop.ports import ToolContext
from loop.tools.registry import FunctionTool


def _ask(arguments: Mapping[str, Any], context: ToolContext) -> str:
    raise HumanNeeded(arguments["question"])


ASK_HUMAN = FunctionTool(
    name="ask_human",
    description="Hand the run to a human operator with a question when you are stuck; they answer or close it.",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 4000}},
        "required": ["question"],
        "additionalProperties": False,
    },
    fn=_ask,
    read_only=True,  # a handoff a human reads, not an action (loop/provenance.py)
)
