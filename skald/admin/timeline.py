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
from itertools import pairwise
from typing import Any, NamedTuple, assert_never

from loop.events import EventKind
from loop.models import SessionEvent
from skald.core.text import clip_to_line

SNIPPET = 280
# An async task's status as the end of a sentence ("async task #3 (log_analyst) succeeded").
TASK_PHRASES = {"queued": "is queued", "running": "is running", "succeeded": "succeeded", "failed": "failed",
                "canceled": "was cancelled", "cancelled": "was cancelled", "expired": "expired"}
# Journal rows a reader does not need line by line; they fold into "n internal rows".
# A compaction's probe report and a quota stop stay lines of their own: the operator reads the score
# and the latch there (SPEC L14).
FOLDED = frozenset({EventKind.TOOL_INTENT, EventKind.TOOL_DONE, EventKind.NOTE, EventKind.FRAME_OPENED,
                    EventKind.FRAME_CLOSED})


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
    duration: str = ""  # how long until the next line ("1.2 s"); empty on the last line


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


class Description(NamedTuple):
    """How one event reads on the timeline."""

    who: str
    who_css: str
    text: str
    outcome: str = ""
    outcome_css: str = ""


def _system(text: str, outcome: str = "", outcome_css: str = "") -> Description:
    return Description("system", "who-system", text, outcome, outcome_css)


def describe(event: SessionEvent, *, agent: str, user: str, names: Mapping[str, str] | None = None
             ) -> Description:
    """How ``event`` reads; ``names`` maps ``user:<id>`` labels to user names. Pure: a match over
    :class:`EventKind`, exhaustive (mypy checks it), so a new kind cannot reach people unnamed."""
    try:
        kind = EventKind(event.kind)
    except ValueError:  # a kind this release does not know (a newer writer): words, never the raw kind
        return _system(event.kind.removeprefix("control:").replace("_", " "))
    p: Mapping[str, Any] = event.payload or {}
    match kind:
        case EventKind.USER:
            author = str(p.get("author") or "")
            content = clip_to_line(p.get("content", ""), SNIPPET)
            if author.startswith("agent:"):  # a delegating agent's task for its child: that agent wrote it
                return Description(author.removeprefix("agent:"), "who-agent", content)
            # Runs record their launcher as ``user:<id>``; the page names the person instead.
            return Description(author if author and not author.startswith("user:") else user, "who-user", content)
        case EventKind.ASSISTANT:
            return _assistant(event, p, agent)
        case EventKind.TOOL_RESULT:
            failed = p.get("is_error") or p.get("status") not in (None, "completed")
            outcome = str(p.get("status", "completed")) if not p.get("is_error") else "error"
            return Description(f"tool {p.get('name', '?')}", "who-tool", clip_to_line(p.get("content", ""), SNIPPET),
                               outcome, "outcome-error" if failed else "status status-completed")
        case EventKind.SUBAGENT_RESULT:
            return Description(f"sub-agent {p.get('agent', '?')}", "who-agent",
                               clip_to_line(p.get("content", ""), SNIPPET), str(p.get("outcome", "")))
        case EventKind.COMPACTION:
            m = p.get("manifest") or {}
            return _system(f"compacted seq {m.get('first_seq')} to {m.get('last_seq')} ({m.get('count')} rows) "
                           "into a summary")
        case EventKind.COMPACTION_PROBE:
            latched = " — latched: no further compaction this episode" if p.get("latched") else ""
            return _system(f"probed the summary: {p.get('lost_permille')}‰ lost{latched}", str(p.get("result", "")),
                           "outcome-error" if p.get("degraded") else "status status-completed")
        case EventKind.COMPACTION_QUOTA:
            return _system(f"stopped: compaction quota reached ({p.get('compactions')} of "
                           f"{p.get('max_per_episode')} compactions)", "budget exceeded", "outcome-error")
        case EventKind.CANCELED:
            reason = str(p.get("reason") or "").replace("_", " ")
            return _system("the exchange was cancelled" + (f": {reason}" if reason else ""), "cancelled",
                           "outcome-error")
        case EventKind.APPROVAL_REQUESTED:
            return Description("gate", "who-system", f"{p.get('name', '?')} needs a human's approval", "waiting",
                               "status status-pending")
        case EventKind.APPROVAL_RESOLVED:
            by = str(p.get("by", ""))
            reason = f" — “{clip_to_line(p['reason'], 120)}”" if p.get("reason") else ""
            status = str(p.get("status", ""))
            name = str(p.get("by_name") or (names or {}).get(by, by or "approver"))
            return Description(name, "who-user",
                               f"answered the parked call{reason}", status, f"status status-{status}")
        case EventKind.EXCHANGE_PARKED:
            question = p.get("question") or ""
            return _system("parked: waiting for a human" + (f" — {question}" if question else ""), "awaiting human",
                           "status status-pending")
        case EventKind.EXCHANGE_SETTLED:
            outcome = str(p.get("outcome", ""))
            return _system("the exchange ended", outcome.replace("_", " "),
                           "outcome-error" if outcome not in ("", "completed") else "status status-completed")
        case EventKind.HANDOFF:
            return Description("operator", "who-user",
                               clip_to_line(p.get("decision") or p.get("answer") or p, SNIPPET))
        case EventKind.TOOL_INTENT:
            return _system(f"starting {p.get('name', '?')}")
        case EventKind.TOOL_DONE:
            return _system(f"recorded {p.get('name', p.get('key', '?'))}")
        case EventKind.FRAME_OPENED:
            return _system(f"opened a sub-agent frame for {p.get('agent', '?')}")
        case EventKind.FRAME_CLOSED:
            return _system(f"closed the sub-agent frame of {p.get('agent', '?')}", str(p.get("outcome", "")))
        case EventKind.NOTE:
            case_id = p.get("attached_case")
            return _system(f"attached to case #{case_id}" if case_id is not None else "noted")
        case EventKind.TASK_UPDATE:
            status = str(p.get("status", ""))
            delivered = "; its result was delivered to the agent" if p.get("delivered") else ""
            phrase = TASK_PHRASES.get(status, f"is {status.replace('_', ' ')}")
            return Description("tasks", "who-system",
                               f"async task #{p.get('job', '?')} ({p.get('agent', '?')}) {phrase}{delivered}",
                               status.replace("_", " "), f"status status-{status}")
        case EventKind.EFFECT_REFUSED:
            paths = ", ".join(str(target) for target in (p.get("targets") or [])[:5]) or "?"
            why = ("its worker lost its lease and another worker took over" if p.get("reason") == "lease_lost"
                   else "the stored files changed since the command started")
            return _system(f"refused a stale write by {p.get('tool', '?')} to {paths}: {why}; nothing was applied",
                           "conflict", "outcome-error")
        case EventKind.PROVENANCE | EventKind.INJECTION_SUSPECT:
            return _provenance_line(kind, p)
        case _:
            assert_never(kind)


def _provenance_line(kind: EventKind, p: Mapping[str, Any]) -> Description:
    """Injection provenance (docs/provenance.md) on the timeline."""
    if kind == EventKind.INJECTION_SUSPECT:
        return _system(f"suspected injection in the result of {p.get('tool', '?')} ({p.get('kind', '?')}, score "
                       f"{p.get('score', '?')}): {clip_to_line(str(p.get('excerpt', '')), SNIPPET)}",
                       "suspect", "outcome-error")
    sources = ", ".join(sorted({str(s.get("tool", "?")) for s in p.get("sources") or ()})) or "?"
    marked = ", ".join(str(a.get("path", "?")) for a in p.get("arguments") or ())
    return _system(f"{p.get('key', 'a call')} follows untrusted content from {sources}"
                   + (f"; arguments from it: {marked}" if marked else ""), "tainted", "status status-pending")


def _assistant(event: SessionEvent, p: Mapping[str, Any], agent: str) -> Description:
    who = (event.narrative.rsplit("child:", 1)[-1].strip(":") or agent) if event.narrative else agent
    calls = p.get("tool_calls") or []
    text = clip_to_line(p.get("content", ""), SNIPPET) if p.get("content") else ""
    if calls:
        asks = "; ".join(f"{c.get('name')}({_args(c.get('arguments', ''))})" for c in calls)
        text = (text + " — " if text else "") + f"calls {asks}"
    tokens = "" if p.get("output_tokens") is None else f"{p.get('input_tokens')}→{p.get('output_tokens')} tokens"
    return Description(who, "who-agent", text or "(no text)", tokens, "muted")


def compaction_detail(event: SessionEvent) -> dict[str, Any] | None:
    """What the timeline shows for a compaction, its probe report or a quota stop (SPEC L14)."""
    payload = event.payload or {}
    if event.kind == EventKind.COMPACTION:
        return {"type": "compaction", "summary": payload.get("summary", ""), **payload.get("manifest", {})}
    if event.kind == EventKind.COMPACTION_PROBE:
        return {"type": "probe", **payload}
    if event.kind == EventKind.COMPACTION_QUOTA:
        return {"type": "quota", **payload}
    return None


def timeline_lines(events: Iterable[SessionEvent], *, agent: str, user: str,
                   approval_urls: Mapping[str, str] | None = None, names: Mapping[str, str] | None = None
                   ) -> list[Line]:
    """Events in seq order → lines; internal control rows fold under the line before them.

    A sub-agent's answer reads once: its own last line (in its indented frame) says it, so the
    delegating call's ``tool_result`` folds as a journal row and the ``subagent_result`` line says the
    answer went back, repeating the text only when it differs. Each line carries its duration (until
    the next line)."""
    events = list(events)
    # A call key is unique within its frame's narrative (a child's first call has the parent's key).
    delegated = {(e.narrative, str((e.payload or {}).get("key", ""))) for e in events
                 if e.kind == EventKind.SUBAGENT_RESULT}
    lines: list[Line] = []
    urls = approval_urls or {}
    child_answer = ""
    for event in events:
        who, who_css, text, outcome, outcome_css = describe(event, agent=agent, user=user, names=names)
        payload = event.payload or {}
        if event.kind == EventKind.ASSISTANT and depth_of(event.narrative) and payload.get("content"):
            child_answer = str(payload["content"]).strip()
        if event.kind == EventKind.SUBAGENT_RESULT and str(payload.get("content", "")).strip() == child_answer:
            text = "returned its answer (above) to the agent that delegated"
        asked = event.kind == EventKind.APPROVAL_REQUESTED
        line = Line(seq=event.seq, at=event.created_at, who=who, who_css=who_css, text=text, outcome=outcome,
                    outcome_css=outcome_css, depth=min(depth_of(event.narrative), 3),
                    payload=json.dumps(event.payload, indent=2, ensure_ascii=False, sort_keys=True),
                    link=urls.get(str((event.payload or {}).get("key", "")), "") if asked else "",
                    compaction=compaction_detail(event))
        repeated = event.kind == EventKind.TOOL_RESULT and (event.narrative, str(payload.get("key", ""))) in delegated
        if event.kind in FOLDED or repeated:
            # Journal rows fold under the line before them (the call they record).
            if lines:
                lines[-1].folded.append(line)
            else:
                lines.append(Line(seq=event.seq, at=event.created_at, who="", who_css="folded", text="",
                                  depth=line.depth, folded=[line]))
            continue
        lines.append(line)
    for line, following in pairwise(lines):
        line.duration = duration_text((following.at - line.at).total_seconds())
    return lines


def duration_text(seconds: float) -> str:
    """``0.4 s``, ``12 s``, ``3 min 5 s``, ``2 h 10 min``: a row's duration as a person reads it."""
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def receipt_rows(receipt: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """A receipt as (label, value) rows a person reads: nested mappings become rows of their own
    ("detail · answer"), lists of scalars a comma-separated line, anything else compact JSON."""
    rows: list[tuple[str, str]] = []
    _receipt_rows_into(rows, receipt or {}, prefix="")
    return rows


def _receipt_rows_into(rows: list[tuple[str, str]], mapping: Mapping[str, Any], *, prefix: str) -> None:
    for key, value in mapping.items():
        label = f"{prefix}{str(key).replace('_', ' ')}"
        if isinstance(value, Mapping) and value:
            _receipt_rows_into(rows, value, prefix=f"{label} · ")
        elif isinstance(value, list | tuple) and all(_scalar(item) for item in value):
            rows.append((label, ", ".join(str(item) for item in value) or "none"))
        elif _scalar(value):
            rows.append((label, "none" if value is None else str(value)))
        else:
            rows.append((label, json.dumps(value, ensure_ascii=False, sort_keys=True)))


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)
