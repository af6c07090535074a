"""Reads: which subscriptions hear an event, what is due, what a person may see."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from skald.core.roles import Role, has_role
from skald.notifications.events import Event, EventKind, risk_at_least
from skald.notifications.models import Delivery, DeliveryStatus, Subscription

# Whose own subscription may hear an event: the role that may act on it (or be in its audience).
ROLE_FOR_KIND: dict[EventKind, Role] = {
    EventKind.APPROVAL_PENDING: Role.APPROVER,
    EventKind.APPROVAL_ESCALATED: Role.APPROVER,
    EventKind.APPROVAL_EXPIRING: Role.APPROVER,
    EventKind.APPROVAL_EXPIRED: Role.APPROVER,
    EventKind.PROPOSAL_PENDING: Role.REVIEWER,
    EventKind.HANDOFF_WAITING: Role.OPERATOR,
    EventKind.RUN_FAILED: Role.OPERATOR,
    EventKind.RUN_STUCK: Role.OPERATOR,
    EventKind.TASK_DEAD_LETTERED: Role.OPERATOR,
    EventKind.AUDIT_CHAIN_BROKEN: Role.AUDITOR,
}


def _owner_may_hear(subscription: Subscription, event: Event) -> bool:
    owner = subscription.owner
    if owner is None:
        return True  # the organisation's, set up by an admin
    if not owner.is_active:
        return False
    return owner.pk in event.audience or owner.is_superuser or has_role(owner, ROLE_FOR_KIND[event.kind])


def subscription_matches(subscription: Subscription, event: Event) -> bool:
    if not subscription.enabled or str(event.kind) not in subscription.events:
        return False
    if event.kind == EventKind.APPROVAL_ESCALATED:
        if subscription.escalate_after_minutes != event.escalate_after_minutes:
            return False  # each step of the chain hears its own threshold only
    for wanted, actual in ((subscription.security_group, event.security_group), (subscription.agent, event.agent),
                           (subscription.case, event.case)):
        if wanted and wanted != actual:
            return False
    return risk_at_least(event.risk, subscription.min_risk) and _owner_may_hear(subscription, event)


def subscriptions_for(event: Event) -> list[Subscription]:
    """The enabled subscriptions that hear ``event`` (a small table, filtered here: JSON list
    membership is not portable across SQLite and PostgreSQL)."""
    candidates = Subscription.objects.filter(enabled=True).select_related("owner").order_by("chain_order", "id")
    return [s for s in candidates if subscription_matches(s, event)]


def escalation_thresholds() -> list[int]:
    """The distinct "after N minutes" of enabled escalation steps, shortest first."""
    minutes = Subscription.objects.filter(enabled=True, escalate_after_minutes__isnull=False).values_list(
        "escalate_after_minutes", flat=True)
    return sorted({m for m in minutes if m is not None})


def subjects_announced(kind: EventKind, subjects: list[str], *, escalate_after_minutes: int | None = None) -> set[str]:
    """Of ``subjects``, those with a delivery of ``kind`` already recorded (to any subscription; for an
    escalation, to a step of that threshold): the sweep builds no event for them again."""
    query = Delivery.objects.filter(kind=kind, subject__in=subjects)
    if escalate_after_minutes is not None:
        query = query.filter(subscription__escalate_after_minutes=escalate_after_minutes)
    return set(query.values_list("subject", flat=True))


def deliveries_due(*, now: datetime, limit: int = 200) -> list[int]:
    return list(Delivery.objects.filter(status__in=(DeliveryStatus.PENDING, DeliveryStatus.FAILING),
                                        next_attempt_at__lte=now)
                .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])


def subscriptions_visible_to(user: AbstractBaseUser) -> QuerySet[Subscription]:
    """Admins see every subscription; anyone else only their own."""
    query = Subscription.objects.select_related("owner").order_by("id")
    if getattr(user, "is_superuser", False):
        return query
    return query.filter(owner_id=user.pk)
