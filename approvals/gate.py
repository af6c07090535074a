"""The approval gate wired to the kernel (the seed's ``loop_adapters/gate.rs::ApprovalGate``).

``check`` asks the rule engine and audits the decision (rule id and an argument hash, never the
raw arguments); ``park`` writes the durable PendingApproval in the kernel's transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F

from approvals.models import ApprovalRule, ApprovalStatus, PendingApproval
from approvals.pending.notices import approval_announce
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.ports import GateCall, GateVerdict, TurnScope
from skald.core import clock
from skald.core.ids import new_uuid
from skald.notifications.events import EventKind

logger = logging.getLogger(__name__)

DEFAULT_APPROVAL_TTL = timedelta(hours=24)
Previewer = Callable[[str, Mapping[str, Any], TurnScope], str]


def _actor(scope: TurnScope | None) -> Actor:
    if scope is not None and scope.user_id is not None:
        return Actor("user", str(scope.user_id))
    return Actor.system("gate")


class ApprovalGate:
    def __init__(self, *, previewer: Previewer | None = None) -> None:
        self.previewer = previewer

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        from approvals.rules.policy import decide

        if scope is None:
            verdict = GateVerdict("deny", "no scope")
            rule_id = None
        else:
            try:
                decision = decide(tool=call.tool, args=call.arguments, user_id=scope.user_id, agent=scope.agent,
                                  provenance=call.provenance)
                rule = decision.rule
                rule_id = rule.id if rule is not None else None
                detail: dict[str, Any] = {"ttl": getattr(rule, "approval_ttl", None)} if rule is not None else {}
                verdict = GateVerdict(decision.action, decision.reason, rule_id, detail)
            except Exception as exc:
                logger.exception("approval engine fault")
                verdict, rule_id = GateVerdict("deny", f"engine fault: {type(exc).__name__}"), None
        with transaction.atomic():
            if rule_id is not None:
                ApprovalRule.objects.filter(pk=rule_id).update(hit_count=F("hit_count") + 1)
            audit_append(
                actor=_actor(scope), kind=AuditKind.GATE_DECISION, subject_type="tool_call", subject_id=call.call_id,
                payload={"tool": call.tool, "action": verdict.action, "rule": rule_id,
                         "arguments_hash": call.arguments_hash, "reason": verdict.reason[:200],
                         # the scope's agent, so a policy preview re-decides the call as it was gated
                         "agent": scope.agent if scope is not None else None,
                         **({"provenance": provenance_audit(call.provenance)} if call.provenance else {})},
            )
        return verdict

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        """Write the PendingApproval (inside the kernel's park transaction) and describe it for the
        approval event."""
        from loop.models import ToolCall

        tool_call = ToolCall.objects.select_related("exchange").get(pk=call.call_id)
        ttl_seconds = verdict.detail.get("ttl")
        ttl = timedelta(seconds=ttl_seconds) if ttl_seconds else DEFAULT_APPROVAL_TTL
        rule = ApprovalRule.objects.filter(pk=verdict.rule_id).first() if verdict.rule_id else None
        preview = self.previewer(call.tool, call.arguments, scope) if self.previewer else ""
        now = clock.now()
        approval = PendingApproval.objects.create(
            request_id=new_uuid(), tool_call=tool_call, session_id=scope.session_id,
            batch=f"e{tool_call.exchange.number}:t{tool_call.turn}", tool=call.tool, args=dict(call.arguments),
            args_hash=call.arguments_hash, preview=preview, rule=rule,
            rule_snapshot=rule_snapshot(rule), requested_by_id=scope.user_id, status=ApprovalStatus.PENDING,
            expires_at=now + ttl, created_at=now, traceparent=str(verdict.detail.get("traceparent", ""))[:64],
            provenance=approval_provenance(call.provenance, session_id=scope.session_id),
        )
        audit_append(
            actor=_actor(scope), kind=AuditKind.APPROVAL_REQUESTED, subject_type="approval",
            subject_id=str(approval.request_id),
            payload={"tool_call": call.call_id, "tool": call.tool, "rule": verdict.rule_id,
                     "arguments_hash": call.arguments_hash, "expires_at": approval.expires_at.isoformat()},
        )
        approval_announce(approval, EventKind.APPROVAL_PENDING)  # the outbox row commits with the park
        return {"request_id": str(approval.request_id), "tool": call.tool, "preview": preview,
                "rule": approval.rule_snapshot, "expires_at": approval.expires_at.isoformat(),
                "batch": approval.batch, "requested_by_id": approval.requested_by_id,
                **({"provenance": approval.provenance} if approval.provenance else {})}


def provenance_audit(provenance: Mapping[str, Any]) -> dict[str, Any]:
    """What the gate's audit row keeps of a call's provenance: the flags, the source rows and the
    argument paths with where they came from (never the argument values themselves)."""
    return {"seq": provenance.get("seq"), "tainted": bool(provenance.get("tainted")),
            "sources": [{"seq": s.get("seq"), "tool": s.get("tool"), "server": s.get("server"),
                         "suspects": len(s.get("suspects") or ())} for s in provenance.get("sources") or ()],
            "arguments": [{"path": a.get("path"), "seq": a.get("seq"), "how": a.get("how"), "suspect": a.get("suspect")}
                          for a in provenance.get("arguments") or ()],
            "argument_from_suspect": bool(provenance.get("argument_from_suspect"))}


def approval_provenance(provenance: Mapping[str, Any] | None, *, session_id: int) -> dict[str, Any]:
    """The approval's copy: the whole provenance, when each source was recorded (``at``), and whether
    approving needs it acknowledged (an argument from a result with a suspected injection)."""
    if not provenance or not provenance.get("tainted"):
        return {}
    from loop.models import SessionEvent

    sources = list(provenance.get("sources") or ())
    times = dict(SessionEvent.objects.filter(session_id=session_id, seq__in=[s.get("seq") for s in sources])
                 .values_list("seq", "created_at"))
    dated = [{**s, "at": times[s["seq"]].isoformat()} if s.get("seq") in times else dict(s) for s in sources]
    return {**provenance, "sources": dated, "acknowledge_required": bool(provenance.get("argument_from_suspect"))}


def rule_snapshot(rule: ApprovalRule | None) -> dict[str, Any]:
    if rule is None:
        return {}
    return {"id": rule.pk, "tool_pattern": rule.tool_pattern, "arg_matchers": rule.arg_matchers,
            "action": rule.action, "priority": rule.priority,
            "group": rule.group.name if rule.group is not None else None}
