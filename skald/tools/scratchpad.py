"""``scratchpad_get`` / ``scratchpad_set``: per session, shared by siblings, last writer wins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.actors import Actor
from loop.ports import ToolContext
from loop.tools.registry import FunctionTool
from skald.loop_adapters.store import call_fence, kernel_store
from skald.sessions.effects import refused_when_taken_over

MAX_VALUE = 16 * 1024
KEY = {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[A-Za-z0-9_.:-]+$"}


def _get(arguments: Mapping[str, Any], context: ToolContext) -> str:
    value = kernel_store().scratchpad_get(context.scope.session_id, arguments["key"])
    return value if value is not None else f"(no value for {arguments['key']})"


def _set(arguments: Mapping[str, Any], context: ToolContext) -> str:
    # Fenced: a driver taken over while the call ran stores nothing (the new holder's value stands).
    store = call_fence(context) or kernel_store()
    with refused_when_taken_over(session_id=context.scope.session_id, tool="scratchpad_set",
                                 call_key=context.call_key, targets=[f"scratchpad:{arguments['key']}"],
                                 actor=Actor.parse(context.scope.principal)):
        store.scratchpad_set(context.scope.session_id, arguments["key"], arguments["value"],
                             principal=context.scope.principal)
    return f"stored {arguments['key']}"


SCRATCHPAD_GET = FunctionTool(
    name="scratchpad_get",
    description="Read a value from the session scratchpad.",
    parameters={"type": "object", "properties": {"key": KEY}, "required": ["key"], "additionalProperties": False},
    fn=_get,
    concurrency_safe=True,
)

SCRATCHPAD_SET = FunctionTool(
    name="scratchpad_set",
    description="Store a value in the session scratchpad (last writer wins).",
    parameters={
        "type": "object",
        "properties": {"key": KEY, "value": {"type": "string", "maxLength": MAX_VALUE}},
        "required": ["key", "value"],
        "additionalProperties": False,
    },
    fn=_set,
    read_only=True,  # the session's own notes, no effect outside it (loop/provenance.py)
)
