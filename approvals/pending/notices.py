"""What people hear about approvals (issue 31): pending, escalated, about to expire, expired.

"Pending" and "expired" are recorded in the transaction that parks or expires the call; the
time-based ones are found by the sweep from the database (:func:`approval_notices_due`), each
recorded once per subscription by the outbox's unique (kind, subject, subscription).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse

from approvals.models import ApprovalStatus, PendingApproval
from skald.core import clock
from skald.mcp.definitions import split_offered
from skald.mcp.models import McpTool
from skald.models import Run
from skald.notifications.events import Event, EventKind
from skald.notifications.models import Risk
from skald.notifications.selectors import escalation_thresholds, subjects_announced
from skald.notifications.services import notification_record

HIGH_RISK_TOOLS = frozenset({"execute_task"})  # runs a command: always worth a second look
SWEEP_LIMIT = 500


def approval_risk(tool: str) -> str:
    """High for a command or an MCP tool its server annotates as destructive; medium for any other
    gated call (a rule asked a person, so it is never low)."""
    if tool in HIGH_RISK_TOOLS:
        return Risk.HIGH
    parts = split_offered(tool)
    if parts is not None:
        annotations = McpTool.objects.filter(server__name=parts[0], name=parts[1]).values_list(
            "annotations", flat=True).first() or {}
        if annotations.get("destructiveHint") is True:
            return Risk.HIGH
    return Risk.MEDIUM


def approval_event(approval: PendingApproval, kind: EventKind, *, escalate_after_minutes: int | None = None,
                   ) -> Event:
    run = Run.objects.filter(session_id=approval.session_id).select_related("launched_by").first()
    requester = approval.requested_by.get_username() if approval.requested_by is not None else ""
    audience = tuple(sorted({uid for uid in (approval.requested_by_id, run.launched_by_id if run else None)
                             if uid is not None})) if kind == EventKind.APPROVAL_EXPIRED else ()
    waited = int((clock.now() - approval.created_at).total_seconds() // 60)
    return Event(
        kind=kind, subject=_subject(approval),
        summary=f"{approval.tool} asks for approval" + (f" (waiting {waited} min)" if waited else ""),
        link_path=reverse("admin:approvals_pendingapproval_change", args=[approval.pk]),
        occurred_at=clock.now(), requested_by=requester, risk=approval_risk(approval.tool),
        agent=approval.session.agent, security_group=(approval.rule_snapshot or {}).get("group") or "",
        case=str(run.case_id) if run else "", audience=audience, escalate_after_minutes=escalate_after_minutes,
        facts={"request_id": str(approval.request_id), "tool": approval.tool, "tool_call_id": approval.tool_call_id,
               "expires_at": approval.expires_at.isoformat(), "created_at": approval.created_at.isoformat(),
               "preview": approval.preview[:1000], "run": run.pk if run else None,
               "escalate_after_minutes": escalate_after_minutes},
    )


def approval_announce(approval: PendingApproval, kind: EventKind) -> None:
    """Record ``kind`` for ``approval`` in the caller's transaction (park or expire)."""
    notification_record(event=approval_event(approval, kind))


def approval_notices_due() -> int:
    """The sweep's part: approvals that waited past an escalation step, or expire soon. Returns how
    many outbox rows were added."""
    now = clock.now()
    pending = PendingApproval.objects.filter(status=ApprovalStatus.PENDING, expires_at__gt=now).select_related(
        "session", "requested_by").order_by("created_at")
    added = 0
    for minutes in escalation_thresholds():
        waited = _not_announced(pending.filter(created_at__lte=now - timedelta(minutes=minutes)),
                                EventKind.APPROVAL_ESCALATED, escalate_after_minutes=minutes)
        for approval in waited:
            added += len(notification_record(event=approval_event(approval, EventKind.APPROVAL_ESCALATED,
                                                                  escalate_after_minutes=minutes)))
    warning = timedelta(minutes=settings.SKALD_NOTIFY_EXPIRY_WARNING_MINUTES)
    for approval in _not_announced(pending.filter(expires_at__lte=now + warning), EventKind.APPROVAL_EXPIRING):
        added += len(notification_record(event=approval_event(approval, EventKind.APPROVAL_EXPIRING)))
    return added


def _not_announced(approvals: QuerySet[PendingApproval], kind: EventKind, *,
                   escalate_after_minutes: int | None = None) -> list[PendingApproval]:
    """The approvals no delivery of ``kind`` names yet: one query instead of an event per approval
    and sweep. (A subscription added later is not told of what others already heard.)"""
    batch = list(approvals[:SWEEP_LIMIT])
    done = subjects_announced(kind, [_subject(a) for a in batch], escalate_after_minutes=escalate_after_minutes)
    return [a for a in batch if _subject(a) not in done]


def _subject(approval: PendingApproval) -> str:
    return f"approval:{approval.request_id}"
