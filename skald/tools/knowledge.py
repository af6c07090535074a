"""``search_knowledge`` (accepted knowledge only) and ``read_logs`` (the case's log excerpts)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from django.db.models import Q

from loop.errors import ToolError
from loop.ports import ToolContext
from loop.tools.registry import FunctionTool
from proposals.models import KnowledgeEntry
from skald.models import CaseLog

_WORD = re.compile(r"[\w-]{3,}", re.UNICODE)
MAX_HITS = 5


def _search(arguments: Mapping[str, Any], context: ToolContext) -> str:
    terms = sorted({w.lower() for w in _WORD.findall(arguments["query"])})[:12]
    if not terms:
        return "No searchable terms in the query."
    match = Q()
    for term in terms:
        match |= Q(title__icontains=term) | Q(body__icontains=term)
    scored = []
    for entry in KnowledgeEntry.objects.filter(match).only("slug", "title", "body", "version")[:200]:
        text = f"{entry.title} {entry.body}".lower()
        scored.append((sum(text.count(t) for t in terms), entry))
    scored.sort(key=lambda pair: (-pair[0], pair[1].slug))
    if not scored:
        return "No accepted knowledge matches."
    lines = [f"{len(scored[:MAX_HITS])} accepted knowledge entries match:"]
    for score, entry in scored[:MAX_HITS]:
        lines.append(f"- [{entry.slug} v{entry.version}] {entry.title} (score {score}): {entry.body[:400]}")
    return "\n".join(lines)


def _read_logs(arguments: Mapping[str, Any], context: ToolContext) -> str:
    case_id = context.scope.extras.get("case_id")
    if not case_id:
        raise ToolError("this session is not attached to a case", code="no_case")
    logs = CaseLog.objects.filter(case_id=case_id).order_by("id")
    name = arguments.get("name")
    if name:
        logs = logs.filter(name=name)
    found = [f"== {log.name} ==\n{log.content}" for log in logs]
    if not found:
        raise ToolError("no such log on this case" if name else "the case has no logs", code="log_not_found")
    return "\n".join(found)


SEARCH_KNOWLEDGE = FunctionTool(
    name="search_knowledge",
    description="Search accepted knowledge entries (reviewed by humans) for the terms of a query.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 2000}},
        "required": ["query"],
        "additionalProperties": False,
    },
    fn=_search,
    concurrency_safe=True,
)

READ_LOGS = FunctionTool(
    name="read_logs",
    description="Read the log excerpts attached to this session's case (all, or one by name).",
    parameters={
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 120}},
        "additionalProperties": False,
    },
    fn=_read_logs,
    concurrency_safe=True,
    trust="untrusted",  # logs carry user data (issue 30, docs/provenance.md)
)
