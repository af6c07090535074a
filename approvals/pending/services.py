"""Durable approval writes: resolve, expire, cancel. Each service is atomic with its audit row in the same
transaction."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from approvals.models import ApprovalStatus, PendingApproval
from approvals.pending.notices import approval_announce
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop import tracing
from loop.digest import arguments_hash
from skald.core import clock
from skald.core.errors import Conflict, Forbidden, NotFound, SkaldError
from skald.core.roles import Role, has_role
from skald.loop_adapters.work import work_on_commit
from skald.notifications.events import EventKind
from skald.tracing.spans import decision_span

Decision = Literal["approve", "reject"]

# A rejection's reason holds at least one character that is neither a control character nor
# whitespace. The same pattern is the API document's, and it reads the same in Python's and in
# ECMAScript's regex engines (their whitespace sets differ only inside the excluded ranges and at
# U+FEFF, excluded here by name), so a client that validates against the document agrees with us.
REASON_PATTERN = "[^\\s\\x00-\\x1f\\x7f-\\x9f\\ufeff]"
_REASON = re.compile(REASON_PATTERN)


def _approval_for_update(*, request_id: Any = None, tool_call_id: int | None = None,
                         session_id: int | None = None) -> PendingApproval:
    query = PendingApproval.objects.select_for_update()
    if session_id is not None:  # asked from one session's socket: another session's call is not there
        query = query.filter(session_id=session_id)
    try:
        if request_id is not None:
            return query.get(request_id=request_id)
        return query.get(tool_call_id=tool_call_id)
    except (PendingApproval.DoesNotExist, ValueError, ValidationError):
        raise NotFound("No such approval.", code="approval_not_found") from None


def provenance_acknowledgement_check(approval: PendingApproval, *, decision: str, acknowledged: bool) -> None:
    """Refuse to approve a call that follows a suspected injection unless its provenance was
    acknowledged (docs/provenance.md, "denied unless an approver approves it with the provenance in
    front of them")."""
    if decision == "approve" and (approval.provenance or {}).get("acknowledge_required") and not acknowledged:
        raise SkaldError("This call follows a suspected injection: approve it only with its provenance "
                         "acknowledged.", code="provenance_acknowledgement_required", http_status=400,
                         fields={"provenance_acknowledged": ["required to approve this call"]})


def pending_approval_resolve(
    *,
    resolver: AbstractBaseUser,
    decision: str,
    reason: str = "",
    request_id: Any = None,
    tool_call_id: int | None = None,
    session_id: int | None = None,
    provenance_acknowledged: bool = False,
) -> PendingApproval:
    """Resolve one parked call by request id or by tool-call id (the owning session comes from the
    call's own row). Re-validates everything before anything runs; single-use; schedules the
    continuation on commit. With ``session_id`` (a session's websocket), only that session's calls
    are found. Raises SkaldError with a stable code.

    A call with an argument taken from a result with a suspected injection (its provenance says
    ``acknowledge_required``) is approved only with ``provenance_acknowledged``: the approver states
    that they saw the provenance (docs/provenance.md)."""
    if decision not in ("approve", "reject"):
        raise SkaldError("decision must be 'approve' or 'reject'", code="invalid", http_status=400,
                         fields={"decision": ["must be approve or reject"]})
    if decision == "reject" and not _REASON.search(reason):
        # The requester reads why; the admin's form, the API and the console's card all come here.
        raise SkaldError("A reason is required to reject.", code="reason_required", http_status=400,
                         fields={"reason": ["required to reject"]})
    if not has_role(resolver, Role.APPROVER):
        raise Forbidden("Only approvers resolve approvals.", code="permission_denied")
    expired_now = False
    with transaction.atomic(durable=True):
        approval = _approval_for_update(request_id=request_id, tool_call_id=tool_call_id, session_id=session_id)
        if approval.status == ApprovalStatus.EXPIRED:
            raise SkaldError("This approval has expired.", code="approval_expired", http_status=410)
        if approval.status != ApprovalStatus.PENDING:
            raise Conflict("This approval was already resolved.", code="approval_already_resolved",
                           status=approval.status)
        if approval.expires_at <= clock.now():
            expired_now = True
        else:
            if settings.SKALD_FOUR_EYES and approval.requested_by_id == resolver.pk:
                raise Forbidden("Four eyes: the requester cannot approve their own call.", code="four_eyes_required")
            call = approval.tool_call
            if call.arguments_hash != approval.args_hash or arguments_hash(approval.args) != approval.args_hash:
                raise Conflict("The call's arguments changed since approval was requested.",
                               code="approval_arguments_changed")
            provenance_acknowledgement_check(approval, decision=decision, acknowledged=provenance_acknowledged)
            approval.status = ApprovalStatus.APPROVED if decision == "approve" else ApprovalStatus.REJECTED
            approval.resolved_by_id = resolver.pk
            approval.resolved_at = clock.now()
            approval.reason = reason[:2000]
            approval.save(update_fields=["status", "resolved_by", "resolved_at", "reason"])
            audit_append(
                actor=Actor.user(resolver), kind=AuditKind.APPROVAL_RESOLVED, subject_type="approval",
                subject_id=str(approval.request_id),
                payload={"decision": decision, "reason": reason[:500], "tool_call": call.pk,
                         "rule": approval.rule_id, "arguments_hash": approval.args_hash,
                         **({"provenance_acknowledged": provenance_acknowledged} if approval.provenance else {})},
            )
            _announce(approval, resolver_label=f"user:{resolver.pk}", resolver_name=resolver.get_username())
            # The decision's span first: its continuation may run on commit in this process.
            transaction.on_commit(lambda: _trace_decision(approval, decision, f"user:{resolver.pk}"))
            work_on_commit("skald.tasks.resolve_pending_call", call.pk, decision, reason[:2000],
                           key=f"resolve:c{call.pk}")
    if expired_now:
        approvals_expire(request_ids=[approval.request_id])
        raise SkaldError("This approval has expired.", code="approval_expired", http_status=410)
    approval.refresh_from_db()
    return approval


def approvals_expire(*, request_ids: Sequence[Any] | None = None) -> int:
    """Expire overdue pending approvals (the scheduled job calls this with none): each call gets a
    typed ``expired`` result and its run continues, so an unanswered approval never wedges."""
    now = clock.now()
    overdue = PendingApproval.objects.filter(status=ApprovalStatus.PENDING, expires_at__lte=now)
    if request_ids is not None:
        overdue = overdue.filter(request_id__in=list(request_ids))
    expired = 0
    for request_id in list(overdue.values_list("request_id", flat=True)[:500]):
        with transaction.atomic():
            approval = PendingApproval.objects.select_for_update().get(request_id=request_id)
            if approval.status != ApprovalStatus.PENDING:
                continue
            approval.status = ApprovalStatus.EXPIRED
            approval.resolved_at = now
            approval.save(update_fields=["status", "resolved_at"])
            audit_append(actor=Actor.system("expiry"), kind=AuditKind.APPROVAL_EXPIRED, subject_type="approval",
                         subject_id=str(approval.request_id),
                         payload={"tool_call": approval.tool_call_id, "expires_at": approval.expires_at.isoformat()})
            _announce(approval, resolver_label="system:expiry", resolver_name="nobody (it expired)")
            transaction.on_commit(partial(_trace_decision, approval, "expire", "system:expiry"))
            approval_announce(approval, EventKind.APPROVAL_EXPIRED)  # the requester and the operator hear
            work_on_commit("skald.tasks.resolve_pending_call", approval.tool_call_id, "expire", "",
                           key=f"resolve:c{approval.tool_call_id}")
            expired += 1
    return expired


def _trace_decision(approval: PendingApproval, decision: str, decided_by: str) -> None:
    """The decision's span, once it is committed (skald.tracing; nothing while tracing is off)."""
    if not tracing.enabled:
        return
    call = approval.tool_call
    decision_span(exchange_traceparent=call.exchange.traceparent, call_traceparent=approval.traceparent,
                  tool=approval.tool, call_key=call.call_key, decision=decision, decided_by=decided_by,
                  parked_at=approval.created_at, decided_at=approval.resolved_at or clock.now(), rule=approval.rule_id)


def _announce(approval: PendingApproval, *, resolver_label: str, resolver_name: str) -> None:
    """The session's ``control:approval_resolved`` row: ``by`` is the principal label the kernel
    keeps, ``by_name`` what a person reads ("carol", not "user:3")."""
    from skald.loop_adapters.store import kernel_store

    kernel_store().append_event(
        session_id=approval.session_id, kind="control:approval_resolved",
        payload={"request_id": str(approval.request_id), "tool_call_id": approval.tool_call_id,
                 "status": approval.status, "reason": approval.reason[:500], "by": resolver_label,
                 "by_name": resolver_name},
        key=f"approval:{approval.request_id}:resolved", principal=resolver_label,
        exchange_id=approval.tool_call.exchange_id,
    )


def approvals_cancel_for_calls(*, tool_call_ids: Sequence[int], actor_label: str) -> int:
    """A stopped exchange's pending approvals are cancelled (terminal), in the caller's transaction."""
    cancelled = 0
    for approval in PendingApproval.objects.select_for_update().filter(
        tool_call_id__in=list(tool_call_ids), status=ApprovalStatus.PENDING
    ):
        approval.status = ApprovalStatus.CANCELLED
        approval.resolved_at = clock.now()
        approval.save(update_fields=["status", "resolved_at"])
        audit_append(actor=Actor.parse(actor_label), kind=AuditKind.APPROVAL_RESOLVED, subject_type="approval",
                     subject_id=str(approval.request_id), payload={"decision": "cancel", "reason": "stop requested"})
        cancelled += 1
    return cancelled
