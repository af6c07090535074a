"""The session narrative's closed vocabulary: event kinds and their payloads.

Conversation kinds feed the projection; ``control:*`` rows and ``canceled`` markers are journal,
not conversation. Payloads are pydantic models so a malformed row refuses loudly on replay.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class EventKind(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL_RESULT = "tool_result"
    SUBAGENT_RESULT = "subagent_result"
    COMPACTION = "compaction"
    CANCELED = "canceled"
    TOOL_INTENT = "control:tool_intent"
    TOOL_DONE = "control:tool_done"
    APPROVAL_REQUESTED = "control:approval_requested"
    APPROVAL_RESOLVED = "control:approval_resolved"
    EXCHANGE_SETTLED = "control:exchange_settled"
    EXCHANGE_PARKED = "control:exchange_parked"
    HANDOFF = "control:handoff"
    COMPACTION_PROBE = "control:compaction_probe"
    FRAME_OPENED = "control:frame_opened"
    FRAME_CLOSED = "control:frame_closed"
    COMPACTION_QUOTA = "control:compaction_quota"
    NOTE = "control:note"
    # Written into the session log by the product (an async task's or cron run's status, SPEC S4),
    # named here so that every reader of the log knows every kind.
    TASK_UPDATE = "control:task_update"
    # A tool's effect refused after its work (a stale workspace write, a driver taken over): the
    # product records it so the run says in words what was not applied.
    EFFECT_REFUSED = "control:effect_refused"
    # Injection provenance (loop/provenance.py): a call made in a tainted frame, and a suspected
    # instruction found in an untrusted result.
    PROVENANCE = "control:provenance"
    INJECTION_SUSPECT = "control:injection_suspect"


CONVERSATION_KINDS = frozenset(
    {EventKind.USER, EventKind.ASSISTANT, EventKind.TOOL_RESULT, EventKind.SUBAGENT_RESULT, EventKind.COMPACTION}
)


def is_journal(kind: str) -> bool:
    """Control rows and canceled markers are not conversation."""
    return kind.startswith("control:") or kind == EventKind.CANCELED


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UserPayload(_Payload):
    content: str
    author: str = ""


class PlannedCall(_Payload):
    key: str
    id: str
    name: str
    arguments: str


class AssistantPayload(_Payload):
    content: str
    tool_calls: list[PlannedCall] = []
    turn: int
    finish_reason: str = "stop"
    input_tokens: int | None = None
    output_tokens: int | None = None
    duration_ms: int | None = None  # the provider call, send to message end (gen_ai.client.operation.duration)


class ToolResultPayload(_Payload):
    key: str
    name: str
    content: str
    is_error: bool = False
    status: str = "completed"
    truncated: bool = False
    trust: str = "trusted"  # "untrusted": loop/provenance.py (absent on trusted rows)
    trust_reason: str = ""


class SubagentResultPayload(_Payload):
    """A child's one result in its parent's narrative: final text, outcome and token usage."""

    key: str
    agent: str
    content: str
    outcome: str
    frame: int | None = None
    depth: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    trust: str = "trusted"  # the child frame's taint (loop/provenance.py)


class CompactionPayload(_Payload):
    summary: str
    manifest: dict[str, Any]
    trust: str = "trusted"  # the label of the rows it covers (loop/provenance.py)


PAYLOAD_MODELS: dict[str, type[_Payload]] = {
    EventKind.USER: UserPayload,
    EventKind.ASSISTANT: AssistantPayload,
    EventKind.TOOL_RESULT: ToolResultPayload,
    EventKind.SUBAGENT_RESULT: SubagentResultPayload,
    EventKind.COMPACTION: CompactionPayload,
}
