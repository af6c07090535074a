"""What a job run produced: its answer, or whatever it wrote before it ended (read from its
conversation's rows), as its ending records it."""

from __future__ import annotations

from loop.events import EventKind
from loop.models import SessionEvent
from loop.outcomes import Completed, RunOutcome

PARTIAL_CAP = 4000


def partial_output(session_id: int | None, *, narrative: str = "") -> str:
    """Whatever a run produced before it ended: its assistant texts and tool results, newest last."""
    if session_id is None:
        return ""
    parts: list[str] = []
    rows = SessionEvent.objects.filter(session_id=session_id, narrative=narrative,
                                       kind__in=[EventKind.ASSISTANT, EventKind.TOOL_RESULT]).order_by("seq")
    for kind, payload in rows.values_list("kind", "payload"):
        text = str(payload.get("content", "")).strip()
        if text:
            parts.append(text if kind == EventKind.ASSISTANT else f"[{payload.get('name')}] {text}")
    joined = "\n".join(parts)
    return joined[-PARTIAL_CAP:]


def run_output(outcome: RunOutcome, session_id: int | None) -> str:
    """A completed run's answer; otherwise its partial output."""
    if isinstance(outcome, Completed):
        return outcome.answer
    return partial_output(session_id)
