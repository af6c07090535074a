"""The ONE event translator: stored session events and live deltas → the server events a browser
receives. Every durable event carries its ``seq`` so a client can resume with ``after=``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.events import EventKind
from loop.models import SessionEvent

# Total over the closed vocabulary: a browser switches on ``type``, so no kind may fall through.
_TYPES: dict[str, str] = {
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
    EventKind.EXCHANGE_SETTLED: "exchange.settled",
    EventKind.COMPACTION_PROBE: "compaction.probe",
    EventKind.COMPACTION_QUOTA: "compaction.quota",
    EventKind.NOTE: "note",
    "control:task_update": "task.update",  # a job's TaskUpdate (skald.jobs), for the task strip
    "control:frame_opened": "frame.opened",
    "control:frame_closed": "frame.closed",
    "control:effect_refused": "effect.refused",  # a tool's stale effect, refused (skald.sessions.effects)
    EventKind.PROVENANCE: "provenance",  # a call made in a tainted frame (loop/provenance.py)
    EventKind.INJECTION_SUSPECT: "injection.suspect",  # a suspected instruction in an untrusted result
}


def translate_event(event: SessionEvent) -> dict[str, Any]:
    """A stored row → its durable server event (``seq`` included, for ``after=`` resumes)."""
    return {
        "type": _TYPES.get(event.kind, "event"),  # "event": a kind newer than this translator
        "seq": event.seq,
        "kind": event.kind,
        "narrative": event.narrative,
        "exchange": event.exchange_id,
        "payload": event.payload,
        "at": event.created_at.isoformat(),
    }


# Live deltas other than the reply's text: an MCP call's progress (in its session; in an async task's
# parent conversation for the task strip), an MCP server's elicitation card.
LIVE_TYPES = frozenset({"tool.progress", "task.progress", "mcp.elicitation"})


def translate_delta(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A live delta from the bus → ``turn.delta`` (or one of :data:`LIVE_TYPES`); never durable,
    so it carries no ``seq``."""
    kind = payload.get("type")
    return {"type": kind if kind in LIVE_TYPES else "turn.delta", **{k: v for k, v in payload.items() if k != "type"}}
