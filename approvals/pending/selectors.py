"""Reads of durable approvals, written to avoid N+1."""

from __future__ import annotations

from django.db.models import QuerySet

from approvals.models import PendingApproval


def approvals_list(*, status: str | None = None, session_id: int | None = None) -> QuerySet[PendingApproval]:
    query = PendingApproval.objects.select_related("requested_by", "resolved_by").order_by("-id")
    if status:
        query = query.filter(status=status)
    if session_id is not None:
        query = query.filter(session_id=session_id)
    return query


def batch_members(*, session_id: int, batch: str) -> QuerySet[PendingApproval]:
    return PendingApproval.objects.filter(session_id=session_id, batch=batch).order_by("tool_call_id")
