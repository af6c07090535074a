"""Known tools: every tool a model was offered, recorded the first time it is seen, so that an operator
can gate it (SPEC A5: the "dynamic" category)."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import IntegrityError, transaction

from approvals.models import KnownTool, ToolCategory
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.providers.base import ToolSpec
from skald.core import clock
from skald.mcp.definitions import split_offered
from skald.mcp.tools_cache import offers


def known_tools_record(*, specs: Sequence[ToolSpec], category: str = ToolCategory.DYNAMIC) -> int:
    """Upsert tools offered to a model; returns how many were new."""
    now = clock.now()
    with transaction.atomic():
        existing = set(KnownTool.objects.filter(name__in=[s.name for s in specs]).values_list("name", flat=True))
        created: list[str] = []
        # One savepoint per new name, in name order (concurrent recorders lock names in the same
        # order, so they cannot deadlock): a name a concurrent recorder inserted first is theirs to
        # audit, so every tool is recorded, and audited, exactly once.
        for spec in sorted((s for s in specs if s.name not in existing), key=lambda s: s.name):
            try:
                with transaction.atomic():
                    KnownTool.objects.create(name=spec.name, description=spec.description[:500],
                                             first_seen=now, last_seen=now, **_facts(spec, category))
            except IntegrityError:
                continue
            created.append(spec.name)
        KnownTool.objects.filter(name__in=existing).update(last_seen=now)
        for spec in specs:  # an MCP tool's pinned definition may have been re-approved since
            if spec.name in existing and split_offered(spec.name) is not None:
                KnownTool.objects.filter(name=spec.name).update(description=spec.description[:500],
                                                                **_facts(spec, category))
        if created:
            audit_append(actor=Actor.system("discovery"), kind=AuditKind.KNOWN_TOOL_RECORDED, subject_type="tool",
                         subject_id=",".join(created)[:64], payload={"tools": created})
    return len(created)


def _facts(spec: ToolSpec, category: str) -> dict[str, object]:
    """An MCP tool (``mcp__{server}__{tool}``) is recorded as such, with its server, input schema
    and pinned annotations; any other tool with the category it was offered under."""
    parts = split_offered(spec.name)
    if parts is None:
        return {"category": category}
    server, tool = parts
    annotations = next((dict(o.annotations) for o in offers() if o.server == server and o.tool == tool), {})
    return {"category": ToolCategory.MCP, "server": server, "input_schema": dict(spec.parameters),
            "annotations": annotations}
