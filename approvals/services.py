"""Approval writes. Each service is atomic with its audit row in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from approvals.models import KnownTool, ToolCategory
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.providers.base import ToolSpec
from skald.core import clock


def known_tools_record(*, specs: Sequence[ToolSpec], category: str = ToolCategory.DYNAMIC) -> int:
    """Upsert tools offered to a model; returns how many were new."""
    now = clock.now()
    created = 0
    with transaction.atomic():
        existing = set(KnownTool.objects.filter(name__in=[s.name for s in specs]).values_list("name", flat=True))
        fresh = [s for s in specs if s.name not in existing]
        KnownTool.objects.bulk_create(
            [KnownTool(name=s.name, category=category, description=s.description[:500], first_seen=now,
                       last_seen=now) for s in fresh],
            ignore_conflicts=True,
        )
        KnownTool.objects.filter(name__in=existing).update(last_seen=now)
        created = len(fresh)
        if fresh:
            audit_append(actor=Actor.system("discovery"), kind=AuditKind.KNOWN_TOOL_RECORDED, subject_type="tool",
                         subject_id=",".join(sorted(s.name for s in fresh))[:64],
                         payload={"tools": sorted(s.name for s in fresh)})
    return created
