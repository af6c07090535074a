"""``propose_knowledge``: records a proposal candidate. Humans dispose; nothing is published here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.ports import ToolContext
from loop.tools.registry import FunctionTool


def _propose(arguments: Mapping[str, Any], context: ToolContext) -> str:
    # The call itself (its stored arguments) is the candidate; capture turns it into a pending
    # proposal when the run resolves.
    return f"proposal candidate recorded: {arguments['title']!s} (a reviewer will accept or reject it)"


PROPOSE_KNOWLEDGE = FunctionTool(
    name="propose_knowledge",
    description="Propose a piece of knowledge for reviewers to accept or reject when this run resolves.",
    parameters={
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 1, "maxLength": 200},
            "body": {"type": "string", "minLength": 1, "maxLength": 32000},
            "evidence": {"type": "string", "maxLength": 2000,
                         "description": "What supports the claim (log lines, tool results)."},
        },
        "required": ["title", "body"],
        "additionalProperties": False,
    },
    fn=_propose,
    read_only=True,  # nothing changes until a reviewer accepts it (loop/provenance.py)
)
