"""Case writes. Each is one atomic service with its audit row in the same transaction."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core import clock
from skald.models import Case, CaseLog


def case_create(
    *,
    actor: Actor,
    title: str,
    description: str = "",
    logs: Sequence[tuple[str, str]] = (),
    created_by_id: int | None = None,
) -> Case:
    """Create a case with its attached log excerpts (``(name, content)`` pairs)."""
    with transaction.atomic():
        case = Case.objects.create(
            title=title, description=description, created_by_id=created_by_id, created_at=clock.now()
        )
        CaseLog.objects.bulk_create([CaseLog(case=case, name=name, content=content) for name, content in logs])
        audit_append(
            actor=actor,
            kind=AuditKind.CASE_CREATED,
            subject_type="case",
            subject_id=case.pk,
            payload={"title": title, "logs": [name for name, _ in logs]},
        )
    return case


def case_save(*, actor: Actor, case: Case, created_by_id: int | None, changed: list[str]) -> Case:
    """Create or update a case from a form (the admin); audited."""
    with transaction.atomic():
        creating = case.pk is None
        if creating:
            case.created_at = clock.now()
            case.created_by_id = created_by_id
        case.save()
        audit_append(
            actor=actor, kind=AuditKind.CASE_CREATED if creating else AuditKind.CASE_UPDATED, subject_type="case",
            subject_id=case.pk, payload={"title": case.title, "changed": sorted(changed)},
        )
    return case


def case_update(*, actor: Actor, case: Case, changes: dict[str, object]) -> Case:
    with transaction.atomic(durable=True):
        for field, value in changes.items():
            setattr(case, field, value)
        case.save(update_fields=list(changes) or None)
        audit_append(actor=actor, kind=AuditKind.CASE_UPDATED, subject_type="case", subject_id=case.pk,
                     payload={"changed": sorted(changes)})
    return case
