"""The ONE event translator: stored session events and live deltas → the server events a browser
receives. Every durable event carries its ``seq`` so a client can resume with ``after=``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.events import EventKind
from loop.models import SessionEvent

_TYPES = {
    EventKind.USER: "message.user",
    EventKind.ASSISTANT: "message.assistant",
    EventKind.TOOL_RESULT: "tool.result",
    EventKind.TOOL_INTENT: "tool.started",
    EventKind.TOOL_DONE: "tool.done",
    EventKind.CANCELED: "exchange.canceled",
    EventKind.APPROVAL_REQUESTED: "approval.requested",
    EventKind.APPROVAL_RESOLVED: "approval.resolved",
    EventKind.EXCHANGE_PARKED: "exchange.parked",
    EventKind.SUBAGENT_RESULT: "subagent.result",
    EventKind.COMPACTION: "compaction",
    EventKind.HANDOFF: "handoff",
}


def translate_event(event: SessionEvent) -> dict[str, Any]:
    return {
        "type": _TYPES.get(event.kind, "event"),
        "seq": event.seq,
        "kind": event.kind,
        "narrative": event.narrative,
        "exchange": event.exchange_id,
        "payload": event.payload,
        "at": event.created_at.isoformat(),
    }


def translate_delta(payload: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "turn.delta", **{k: v for k, v in payload.items() if k != "type"}}
