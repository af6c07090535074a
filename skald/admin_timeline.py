"""A run's event log as people read it: one line per event in words (who, what, which tool, the
outcome), internal control rows folded, child frames indented, the payload one click away.

Pure over stored rows: :func:`timeline_lines` never queries, so the run page and its live fragment
render the same lines from one read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from loop.models import SessionEvent
from skald.core.text import clip_to_line

SNIPPET = 280
# Journal rows a reader does not need line by line; they fold into "n internal rows".
# A compaction's probe report and a quota stop stay lines of their own: the operator reads the score
# and the latch there (SPEC L14).
FOLDED = frozenset({"control:tool_intent", "control:tool_done", "control:note", "control:frame_opened",
                    "control:frame_closed"})


@dataclass
class Line:
    seq: int
    at: datetime
    who: str
    who_css: str
    text: str
    outcome: str = ""
    outcome_css: str = ""
    depth: int = 0
    payload: str = ""
    link: str = ""  # a URL the line points at (the approval it asked for)
    folded: list[Line] = field(default_factory=list)  # internal rows folded under this marker
    compaction: dict[str, Any] | None = None  # what the compaction entry shows (SPEC L14)


def _args(arguments: str) -> str:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return clip_to_line(arguments, 80)
    if isinstance(parsed, dict):
        return ", ".join(f"{k}={clip_to_line(json.dumps(v, ensure_ascii=False), 40)}" for k, v in parsed.items())
    return clip_to_line(arguments, 80)


def depth_of(narrative: str) -> int:
    """``child:<name>:`` per level of delegation (frames carry their narrative prefix)."""
    return narrative.count("child:")


def describe(event: SessionEvent, *, agent: str, user: str, names: Mapping[str, str] | None = None
             ) -> tuple[str, str, str, str, str]:
    """(who, who_css, text, outcome, outcome_css) for one event; ``names`` maps ``user:<id>`` labels
    to user names."""
    p: Mapping[str, Any] = event.payload or {}
    names = names or {}
    kind = event.kind
    if kind == "user":
        author = str(p.get("author") or "")
        if author.startswith("agent:"):  # a delegating agent's task for its child: that agent wrote it
            return author.removeprefix("agent:"), "who-agent", clip_to_line(p.get("content", ""), SNIPPET), "", ""
        # Runs record their launcher as ``user:<id>``; the page names the person instead.
        return (author if author and not author.startswith("user:") else user), "who-user", \
            clip_to_line(p.get("content", ""), SNIPPET), "", ""
    if kind == "assistant":
        who = (event.narrative.rsplit("child:", 1)[-1].strip(":") or agent) if event.narrative else agent
        calls = p.get("tool_calls") or []
        text = clip_to_line(p.get("content", ""), SNIPPET) if p.get("content") else ""
        if calls:
            asks = "; ".join(f"{c.get('name')}({_args(c.get('arguments', ''))})" for c in calls)
            text = (text + " — " if text else "") + f"calls {asks}"
        tokens = "" if p.get("output_tokens") is None else f"{p.get('input_tokens')}→{p.get('output_tokens')} tokens"
        return who, "who-agent", text or "(no text)", tokens, "muted"
    if kind == "tool_result":
        failed = p.get("is_error") or p.get("status") not in (None, "completed")
        outcome = str(p.get("status", "completed")) if not p.get("is_error") else "error"
        return f"tool {p.get('name', '?')}", "who-tool", clip_to_line(p.get("content", ""), SNIPPET), outcome, \
            "outcome-error" if failed else "status status-completed"
    if kind == "subagent_result":
        return f"sub-agent {p.get('agent', '?')}", "who-agent", clip_to_line(p.get("content", ""), SNIPPET), \
            str(p.get("outcome", "")), ""
    if kind == "compaction":
        m = p.get("manifest") or {}
        return "system", "who-system", f"compacted seq {m.get('first_seq')} to {m.get('last_seq')} "\
            f"({m.get('count')} rows) into a summary", "", ""
    if kind == "control:compaction_probe":
        latched = " — latched: no further compaction this episode" if p.get("latched") else ""
        return "system", "who-system", f"probed the summary: {p.get('lost_permille')}‰ lost{latched}", \
            str(p.get("result", "")), "outcome-error" if p.get("degraded") else "status status-completed"
    if kind == "control:compaction_quota":
        return "system", "who-system", f"stopped: compaction quota reached ({p.get('compactions')} of "\
            f"{p.get('max_per_episode')} compactions)", "budget exceeded", "outcome-error"
    if kind == "canceled":
        return "system", "who-system", "the exchange was cancelled", "cancelled", "outcome-error"
    if kind == "control:approval_requested":
        return "gate", "who-system", f"{p.get('name', '?')} needs a human's approval", "waiting", \
            "status status-pending"
    if kind == "control:approval_resolved":
        by = str(p.get("by", ""))
        reason = f" — “{clip_to_line(p['reason'], 120)}”" if p.get("reason") else ""
        status = str(p.get("status", ""))
        return names.get(by, by or "approver"), "who-user", f"answered the parked call{reason}", status, \
            f"status status-{status}"
    if kind == "control:exchange_parked":
        question = p.get("question") or ""
        return "system", "who-system", "parked: waiting for a human" + (f" — {question}" if question else ""), \
            "awaiting human", "status status-pending"
    if kind == "control:exchange_settled":
        return "system", "who-system", "the exchange ended", str(p.get("outcome", "")), "status"
    if kind == "control:handoff":
        return "operator", "who-user", clip_to_line(p.get("decision") or p.get("answer") or p, SNIPPET), "", ""
    if kind == "control:tool_intent":
        return "system", "who-system", f"starting {p.get('name', '?')}", "", ""
    if kind == "control:tool_done":
        return "system", "who-system", f"recorded {p.get('name', p.get('key', '?'))}", "", ""
    if kind == "control:task_update":
        status = str(p.get("status", ""))
        delivered = " and its result was delivered" if p.get("delivered") else ""
        text = f"async task #{p.get('job', '?')} ({p.get('agent', '?')}) is {status}{delivered}"
        return "tasks", "who-system", text, status, f"status status-{status}"
    # Any other internal row reads in words, never as its internal kind.
    return "system", "who-system", kind.removeprefix("control:").replace("_", " "), "", ""


def compaction_detail(event: SessionEvent) -> dict[str, Any] | None:
    """What the timeline shows for a compaction, its probe report or a quota stop (SPEC L14)."""
    payload = event.payload or {}
    if event.kind == "compaction":
        return {"type": "compaction", "summary": payload.get("summary", ""), **payload.get("manifest", {})}
    if event.kind == "control:compaction_probe":
        return {"type": "probe", **payload}
    if event.kind == "control:compaction_quota":
        return {"type": "quota", **payload}
    return None


def timeline_lines(events: Iterable[SessionEvent], *, agent: str, user: str,
                   approval_urls: Mapping[str, str] | None = None, names: Mapping[str, str] | None = None
                   ) -> list[Line]:
    """Events in seq order → lines; internal control rows fold under the line before them."""
    lines: list[Line] = []
    urls = approval_urls or {}
    for event in events:
        who, who_css, text, outcome, outcome_css = describe(event, agent=agent, user=user, names=names)
        line = Line(seq=event.seq, at=event.created_at, who=who, who_css=who_css, text=text, outcome=outcome,
                    outcome_css=outcome_css, depth=min(depth_of(event.narrative), 3),
                    payload=json.dumps(event.payload, indent=2, ensure_ascii=False, sort_keys=True),
                    link=urls.get(str((event.payload or {}).get("key", "")), "") if event.kind.endswith("requested")
                    else "", compaction=compaction_detail(event))
        if event.kind in FOLDED:
            # Journal rows fold under the line before them (the call they record).
            if lines:
                lines[-1].folded.append(line)
            else:
                lines.append(Line(seq=event.seq, at=event.created_at, who="", who_css="folded", text="",
                                  depth=line.depth, folded=[line]))
            continue
        lines.append(line)
    return lines


def receipt_rows(receipt: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """A receipt as (label, value) rows: scalars as they are, nested values as compact JSON."""
    if not receipt:
        return []
    rows = []
    for key, value in receipt.items():
        shown = value if isinstance(value, str | int | float | bool) or value is None else \
            json.dumps(value, ensure_ascii=False, sort_keys=True)
        rows.append((key.replace("_", " "), str(shown)))
    return rows
