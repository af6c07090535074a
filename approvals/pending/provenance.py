"""The approval card's provenance banner (issue 30, docs/provenance.md): "follows untrusted content".

A read over the approval's stored provenance (written by the gate at park from the kernel's
``control:provenance`` row) and the session's stored rows: for each untrusted source, which tool
(and MCP server), when, a link to its event, and its content around the suspected instruction with
the span highlighted; for each argument, whether it came from untrusted content and from where.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html

from approvals.models import PendingApproval
from loop.models import SessionEvent

CONTEXT_CHARS = 160


@dataclass
class SourceView:
    seq: int
    tool: str
    server: str | None
    when: Any
    url: str
    suspects: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ArgumentView:
    path: str
    value: str
    source: str
    how: str
    suspect: bool


def provenance_view(approval: PendingApproval, *, events_open: bool) -> dict[str, Any] | None:
    """The banner's content, or None when the call did not follow untrusted content."""
    found = approval.provenance or {}
    if not found.get("tainted"):
        return None
    seqs = {int(s["seq"]) for s in found.get("sources") or () if s.get("seq") is not None}
    events = {e.seq: e for e in SessionEvent.objects.filter(session_id=approval.session_id, seq__in=seqs)}
    sources: list[SourceView] = []
    for source in found.get("sources") or ():
        seq = int(source.get("seq") or 0)
        event = events.get(seq)
        content = str((event.payload or {}).get("content") or (event.payload or {}).get("summary") or "") \
            if event is not None else ""
        sources.append(SourceView(
            seq=seq, tool=str(source.get("tool", "")), server=source.get("server"),
            when=event.created_at if event is not None else None,
            url=_event_url(event) if event is not None and events_open else "",
            suspects=[{**suspect, "html": highlighted(content, suspect)} for suspect in source.get("suspects") or ()],
        ))
    tools = {s.seq: s.tool for s in sources}
    arguments = [ArgumentView(path=str(a.get("path", "")), value=str(a.get("value", "")),
                              source=f"{tools.get(int(a.get('seq') or 0), a.get('tool', ''))} (seq {a.get('seq')})",
                              how=str(a.get("how", "")), suspect=bool(a.get("suspect")))
                 for a in found.get("arguments") or ()]
    return {"sources": sources, "arguments": arguments, "marked": {a.path for a in arguments},
            "acknowledge_required": bool(found.get("acknowledge_required")),
            "injection_suspected": bool(found.get("injection_suspected")), "seq": found.get("seq")}


def highlighted(content: str, suspect: Mapping[str, Any]) -> str:
    """The content around a suspect span, the span in ``<mark>`` (escaped)."""
    try:
        start, end = int(suspect.get("start") or 0), int(suspect.get("end") or 0)
    except (TypeError, ValueError):
        return ""
    if not content or not 0 <= start < end <= len(content):
        return format_html("<mark>{}</mark>", str(suspect.get("excerpt") or ""))
    before = content[max(0, start - CONTEXT_CHARS):start]
    after = content[end:end + CONTEXT_CHARS]
    return format_html("{}{}<mark class=\"skald-suspect\">{}</mark>{}{}", "…" if start > CONTEXT_CHARS else "",
                       before, content[start:end], after, "…" if end + CONTEXT_CHARS < len(content) else "")


def _event_url(event: SessionEvent) -> str:
    try:
        return reverse("admin:loop_sessionevent_change", args=[event.pk])
    except NoReverseMatch:
        return ""
