"""What a reviewer sees beside a claim: pure functions from stored rows to the evidence snapshot.

Nothing here touches the database; :mod:`proposals.services` reads the rows and writes the result.
The evidence is a snapshot taken at capture, so a reviewer judges the claim on what the agent saw
when it made it, not on whatever the session holds later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.text import slugify

EXCERPT_CHARS = 500
ANSWER_TITLE_TICKET_CHARS = 120
MAX_CITED_RESULTS = 12  # the most recent results before the claim; older ones are in the session
SLUG_MAX = 120
TITLE_MAX = 200

# What the agent saw before it spoke: results of its own tools and of its delegates.
_SEEN_KINDS = frozenset({"tool_result", "subagent_result"})


@dataclass(frozen=True, slots=True)
class EventRow:
    """The fields of a ``SessionEvent`` the evidence needs."""

    seq: int
    kind: str
    narrative: str
    payload: Mapping[str, Any]


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def answer_title(case_title: str, answer: str, ticket: str) -> str:
    """``<case>: <the answer's first line>`` (the finding, ≤ 120 chars), so two runs' proposals read
    apart; an empty answer falls back to the ticket's first line."""
    finding = _first_line(answer).lstrip("#*-> ").strip() or f"answer to {_first_line(ticket) or 'an untitled ticket'}"
    return excerpt(f"{case_title}: {excerpt(finding, ANSWER_TITLE_TICKET_CHARS)}", TITLE_MAX)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def knowledge_slug(title: str, *, fallback: str) -> str:
    """The entry slug a title names (``fallback`` when the title has nothing sluggable)."""
    return slugify(title)[:SLUG_MAX].strip("-") or fallback


def _cite(row: EventRow) -> dict[str, Any]:
    payload = row.payload
    cited: dict[str, Any] = {"seq": row.seq, "kind": row.kind}
    if row.kind == "tool_result":
        cited["tool"] = payload.get("name", "")
        cited["is_error"] = bool(payload.get("is_error", False))
        cited["excerpt"] = excerpt(str(payload.get("content", "")))
    elif row.kind == "subagent_result":
        cited["tool"] = f"agent:{payload.get('agent', '')}"
        cited["excerpt"] = excerpt(str(payload.get("content", "")))
    else:
        cited["excerpt"] = excerpt(str(payload.get("content", "")))
    return cited


def _cite_call(row: EventRow, call_key: str) -> dict[str, Any]:
    call = next(c for c in row.payload.get("tool_calls", []) if c.get("key") == call_key)
    said = str(row.payload.get("content", "")).strip()
    text = f"{said}\n→ {call.get('name')}({call.get('arguments', '')})" if said else (
        f"{call.get('name')}({call.get('arguments', '')})"
    )
    return {"seq": row.seq, "kind": row.kind, "tool": call.get("name", ""), "excerpt": excerpt(text)}


def _seen_before(rows: Sequence[EventRow], *, before_seq: int, narrative: str) -> list[dict[str, Any]]:
    seen = [r for r in rows if r.seq < before_seq and r.narrative == narrative and r.kind in _SEEN_KINDS]
    return [_cite(r) for r in seen[-MAX_CITED_RESULTS:]]


def events_for_call(rows: Sequence[EventRow], *, call_key: str, narrative: str) -> list[dict[str, Any]]:
    """The exchange's results the agent had seen when it made the call, then the call itself.

    ``rows`` are the exchange's events in ``seq`` order. An empty list means the call's assistant
    turn is not among them (a history that no longer holds it): capture still proceeds, without
    citations, rather than inventing any.
    """
    made = next(
        (r for r in rows if r.kind == "assistant" and r.narrative == narrative
         and any(c.get("key") == call_key for c in r.payload.get("tool_calls", []))),
        None,
    )
    if made is None:
        return []
    return [*_seen_before(rows, before_seq=made.seq, narrative=narrative), _cite_call(made, call_key)]


def final_answer(rows: Sequence[EventRow]) -> EventRow | None:
    """The root agent's last assistant turn of an exchange, if it said anything."""
    last = next((r for r in reversed(rows) if r.kind == "assistant" and r.narrative == ""), None)
    if last is None or not str(last.payload.get("content", "")).strip():
        return None
    return last


def events_for_answer(rows: Sequence[EventRow], answer: EventRow) -> list[dict[str, Any]]:
    return [*_seen_before(rows, before_seq=answer.seq, narrative=""), _cite(answer)]


def call_arguments(arguments: Any) -> tuple[str, str, str]:
    """``(title, body, agent_evidence)`` from a ``propose_knowledge`` call's stored arguments.

    The tool's schema was validated before it ran; this only guards the types of a stored row.
    """
    args = arguments if isinstance(arguments, Mapping) else {}

    def text(name: str) -> str:
        value = args.get(name, "")
        return value if isinstance(value, str) else json.dumps(value)

    return excerpt(text("title"), TITLE_MAX), text("body").strip(), text("evidence").strip()


def snapshot(
    *,
    case: Mapping[str, Any] | None,
    ticket: str,
    run: Mapping[str, Any] | None,
    session_id: int,
    exchange: int,
    source: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]],
    agent_evidence: str = "",
) -> dict[str, Any]:
    """The evidence object stored on a proposal (and served by the API as is)."""
    return {
        "case": dict(case) if case else None,
        "ticket": ticket,
        "run": dict(run) if run else None,
        "session": session_id,
        "exchange": exchange,
        "source": dict(source),
        "agent_evidence": agent_evidence,
        "events": list(events),
    }
