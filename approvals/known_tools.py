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
                    KnownTool.objects.create(name=spec.name, category=category, description=spec.description[:500],
                                             first_seen=now, last_seen=now)
            except IntegrityError:
                continue
            created.append(spec.name)
        KnownTool.objects.filter(name__in=existing).update(last_seen=now)
        if created:
            audit_append(actor=Actor.system("discovery"), kind=AuditKind.KNOWN_TOOL_RECORDED, subject_type="tool",
                         subject_id=",".join(created)[:64], payload={"tools": created})
    return len(created)
