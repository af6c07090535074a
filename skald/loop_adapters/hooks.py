"""Policy hooks wired to the audit chain: one coarse audit row per deny, no payload echo (SPEC L13).

Hooks are constructor-injected, never env-driven: a deployment that wants policies builds them in
code and passes them to :func:`audited_hooks`; with none, the driver runs pass-through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.hooks import Hook, HookContext, HookPoint, LoopHooks


def audit_deny(point: HookPoint, context: HookContext, reason: str) -> None:
    with transaction.atomic():
        audit_append(actor=Actor.system("hooks"), kind=AuditKind.HOOK_DENIED, subject_type="session",
                     subject_id=context.session_id,
                     payload={"point": point.value, "reason": reason, "exchange": context.exchange_id})


def audit_errors(point: HookPoint, context: HookContext, errors: int) -> None:
    """Hooks that raised are contained (never a deny, never a bypass) and counted here, durably."""
    with transaction.atomic():
        audit_append(actor=Actor.system("hooks"), kind=AuditKind.HOOK_ERROR, subject_type="session",
                     subject_id=context.session_id,
                     payload={"point": point.value, "errors": errors, "exchange": context.exchange_id})


def audited_hooks(hooks: Mapping[HookPoint, Sequence[Hook]] | None = None) -> LoopHooks:
    return LoopHooks(hooks or {}, deny_sink=audit_deny, error_sink=audit_errors)
