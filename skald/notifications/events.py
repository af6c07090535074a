"""What is announced: event kinds, the event value features hand over, and the versioned payload.

Pure: no database, no network. The payload (``skald.notification.v1``) is what a webhook receives
as its body; chat and e-mail bodies are rendered from it (:mod:`skald.notifications.render`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from skald.notifications.models import Risk

PAYLOAD_VERSION = "skald.notification.v1"


class EventKind(StrEnum):
    APPROVAL_PENDING = "approval.pending"
    APPROVAL_ESCALATED = "approval.escalated"
    APPROVAL_EXPIRING = "approval.expiring"
    APPROVAL_EXPIRED = "approval.expired"
    PROPOSAL_PENDING = "proposal.pending"
    HANDOFF_WAITING = "handoff.waiting"
    RUN_FAILED = "run.failed"
    RUN_STUCK = "run.stuck"
    TASK_DEAD_LETTERED = "task.dead_lettered"
    AUDIT_CHAIN_BROKEN = "audit.chain_broken"


EVENT_TITLES: dict[EventKind, str] = {
    EventKind.APPROVAL_PENDING: "An approval is waiting",
    EventKind.APPROVAL_ESCALATED: "An approval is still waiting (escalated)",
    EventKind.APPROVAL_EXPIRING: "An approval is about to expire",
    EventKind.APPROVAL_EXPIRED: "An approval expired unanswered",
    EventKind.PROPOSAL_PENDING: "A proposal waits for review",
    EventKind.HANDOFF_WAITING: "A run waits for a person (handoff or back-referral)",
    EventKind.RUN_FAILED: "A run failed",
    EventKind.RUN_STUCK: "A run makes no progress",
    EventKind.TASK_DEAD_LETTERED: "A task was dead-lettered",
    EventKind.AUDIT_CHAIN_BROKEN: "Audit chain verification failed",
}

RISK_ORDER: dict[str, int] = {Risk.LOW: 0, Risk.MEDIUM: 1, Risk.HIGH: 2}


@dataclass(frozen=True)
class Event:
    """One thing worth telling people, as the feature that saw it describes it.

    Attributes:
        kind: what happened.
        subject: what it is about, stable across retries and sweeps (``approval:<request id>``);
            (kind, subject) is announced at most once per subscription.
        summary: one line a person reads: what is asked or what went wrong.
        link_path: the path of the one page where the person acts (made absolute with
            ``SKALD_PUBLIC_URL``); the page needs sign-in.
        requested_by: who asked (a username), when someone did.
        risk: low, medium or high (subscriptions filter on a minimum).
        agent, security_group, case: what subscriptions filter on.
        audience: user ids told even by their own subscriptions' narrower rules (the requester and
            the run's operator of an expired approval).
        facts: extra fields for the payload's ``data`` (JSON values).
        occurred_at: when it happened.
        escalate_after_minutes: for ``approval.escalated``: only the chain step with this threshold.
    """

    kind: EventKind
    subject: str
    summary: str
    link_path: str
    occurred_at: datetime
    requested_by: str = ""
    risk: str = Risk.MEDIUM
    agent: str = ""
    security_group: str = ""
    case: str = ""
    audience: tuple[int, ...] = ()
    facts: dict[str, Any] = field(default_factory=dict)
    escalate_after_minutes: int | None = None


def risk_at_least(risk: str, minimum: str) -> bool:
    return RISK_ORDER.get(risk, 1) >= RISK_ORDER.get(minimum, 0)


def payload_for(event: Event, *, event_id: str, base_url: str) -> dict[str, Any]:
    """The versioned JSON body (``skald.notification.v1``; its schema is in the OpenAPI document)."""
    return {
        "version": PAYLOAD_VERSION,
        "event_id": event_id,
        "type": str(event.kind),
        "title": EVENT_TITLES[event.kind],
        "occurred_at": event.occurred_at.isoformat(),
        "subject": event.subject,
        "summary": event.summary,
        "requested_by": event.requested_by,
        "risk": event.risk,
        "agent": event.agent,
        "security_group": event.security_group,
        "case": event.case,
        "link": base_url.rstrip("/") + event.link_path,
        "data": dict(event.facts),
    }
