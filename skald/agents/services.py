"""Agent catalog writes (admin edits), audited."""

from __future__ import annotations

from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.bounds import Bounds
from loop.errors import HarnessError
from skald.core.errors import SkaldError
from skald.models import Agent


def agent_save(*, actor: Actor, agent: Agent, changed: list[str]) -> Agent:
    try:
        Bounds().override(agent.bounds)
    except HarnessError as exc:
        raise SkaldError(str(exc), code="bounds_invalid") from None
    with transaction.atomic():
        agent.save()
        audit_append(actor=actor, kind=AuditKind.AGENT_CHANGED, subject_type="agent", subject_id=agent.pk,
                     payload={"name": agent.name, "changed": sorted(changed)})
    return agent
