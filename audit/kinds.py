"""Audit kinds: one enumeration in numbered bands, each with a stable dotted label.

Bands: 1xx system and audit itself (13x identity, 16x notifications),
2xx loop sessions/exchanges/events, 3xx tool calls, 4xx
approvals, 5xx cases and runs, 6xx proposals and knowledge, 7xx policy (hooks, budgets).
The kernel names kinds by label (it cannot import this module); :func:`kind_for_label` maps them
and fails loudly on an unknown label.
"""

from __future__ import annotations

from django.db import models


class AuditKind(models.IntegerChoices):
    # 1xx system
    CHAIN_HEAD_RECORDED = 100, "audit.head_recorded"
    CHAIN_HEADS_SIGNED = 101, "audit.heads_signed"
    DEMO_SEEDED = 110, "system.demo_seeded"
    ROLE_GRANTED = 120, "system.role_granted"
    # 13x identity: sign-ins, lockouts, token refreshes and revocations, provider-driven roles
    SIGNED_IN = 130, "identity.signed_in"
    SIGN_IN_FAILED = 131, "identity.sign_in_failed"
    LOCKED_OUT = 132, "identity.locked_out"
    LOCKOUT_LIFTED = 133, "identity.lockout_lifted"
    TOKEN_REFRESHED = 134, "identity.token_refreshed"
    SIGNED_OUT = 135, "identity.signed_out"
    TOKENS_REVOKED = 136, "identity.tokens_revoked"
    ROLES_FROM_PROVIDER = 137, "identity.roles_from_provider"
    GROUP_MAPPING_CHANGED = 138, "identity.group_mapping_changed"
    # 14x identity: user accounts (skald.identity.users, provider users)
    USER_CREATED = 140, "identity.user_created"
    USER_DEACTIVATED = 141, "identity.user_deactivated"
    USER_REACTIVATED = 142, "identity.user_reactivated"
    ROLES_SET = 143, "identity.roles_set"
    USER_DELETED = 144, "identity.user_deleted"
    # 16x notifications (skald/notifications): subscriptions, dead letters and their retries
    NOTIFY_SUBSCRIPTION_CHANGED = 160, "notify.subscription_changed"  # created, updated, deleted
    NOTIFY_SECRET_ROTATED = 161, "notify.secret_rotated"
    NOTIFY_DELIVERY_DEAD = 162, "notify.delivery_dead"  # the retry budget is spent
    NOTIFY_DELIVERY_RETRIED = 163, "notify.delivery_retried"  # a person sent a dead letter again
    # 2xx loop
    SESSION_CREATED = 200, "loop.session.created"
    EXCHANGE_ADMITTED = 210, "loop.exchange.admitted"
    EXCHANGE_PARKED = 211, "loop.exchange.parked"
    EXCHANGE_SETTLED = 212, "loop.exchange.settled"
    EXCHANGE_BROKEN = 213, "loop.exchange.broken"
    EXCHANGE_CANCEL_REQUESTED = 214, "loop.exchange.cancel_requested"
    EXCHANGE_RESUMED = 215, "loop.exchange.resumed"
    TURN_ENDED = 220, "loop.turn.ended"
    EVENT_APPENDED = 230, "loop.event.appended"
    FRAME_OPENED = 240, "loop.frame.opened"
    FRAME_CLOSED = 241, "loop.frame.closed"
    SCRATCHPAD_SET = 250, "loop.scratchpad.set"
    COMPACTION_COMMITTED = 260, "loop.compaction.committed"
    COMPACTION_PROBED = 261, "loop.compaction.probed"
    # 3xx tool calls
    TOOL_CALL_PLANNED = 300, "loop.tool_call.planned"
    TOOL_CALL_TRANSITION = 301, "loop.tool_call.transition"
    # 4xx approvals
    GATE_DECISION = 400, "approvals.gate.decision"
    APPROVAL_REQUESTED = 401, "approvals.approval.requested"
    APPROVAL_RESOLVED = 402, "approvals.approval.resolved"
    APPROVAL_EXPIRED = 403, "approvals.approval.expired"
    RULE_CHANGED = 410, "approvals.rule.changed"
    GROUP_CHANGED = 411, "approvals.group.changed"
    TRIPWIRE_PATTERN_CHANGED = 412, "approvals.tripwire_pattern.changed"
    TRIPWIRE_ALLOW_CHANGED = 413, "approvals.tripwire_allow.changed"
    POLICY_APPLIED = 414, "approvals.policy.applied"  # one policy document applied (names its digest)
    KNOWN_TOOL_RECORDED = 420, "approvals.known_tool.recorded"
    # 5xx cases and runs
    CASE_CREATED = 500, "skald.case.created"
    CASE_UPDATED = 501, "skald.case.updated"
    RUN_LAUNCHED = 510, "skald.run.launched"
    RUN_STATUS_CHANGED = 511, "skald.run.status_changed"
    RUN_HANDOFF_DECIDED = 512, "skald.run.handoff_decided"
    RUN_BACK_REFERRED = 513, "skald.run.back_referred"
    AGENT_CHANGED = 520, "skald.agent.changed"
    WORKSPACE_FILE_WRITTEN = 530, "skald.workspace.file_written"
    WORKSPACE_FILE_DELETED = 531, "skald.workspace.file_deleted"
    EFFECT_REFUSED = 532, "skald.effect.refused"  # a tool's stale effect, not applied
    JOB_CREATED = 540, "skald.job.created"
    JOB_STATE_CHANGED = 541, "skald.job.state_changed"
    JOB_DELIVERED = 542, "skald.job.delivered"
    MCP_SERVER_CHANGED = 550, "skald.mcp.server_changed"  # created, updated, deleted, enabled, disabled
    MCP_TOOLS_PINNED = 551, "skald.mcp.tools_pinned"  # an admin enabled a server: its definitions pinned
    MCP_TOOL_QUARANTINED = 552, "skald.mcp.tool_quarantined"  # a listing differed from the pin (or vanished)
    MCP_DEFINITION_APPROVED = 553, "skald.mcp.definition_approved"
    MCP_DEFINITION_KEPT = 554, "skald.mcp.definition_kept"  # an admin kept a tool quarantined
    MCP_ELICITATION_REQUESTED = 555, "skald.mcp.elicitation_requested"  # a server asked the owner during a call
    MCP_ELICITATION_ANSWERED = 556, "skald.mcp.elicitation_answered"  # accepted, declined, cancelled or expired
    MCP_SAMPLING = 557, "skald.mcp.sampling"  # a server's sampling request: served (tokens) or refused
    # 6xx proposals and knowledge
    PROPOSAL_CAPTURED = 600, "proposals.proposal.captured"
    PROPOSAL_ACCEPTED = 601, "proposals.proposal.accepted"
    PROPOSAL_REJECTED = 602, "proposals.proposal.rejected"
    KNOWLEDGE_VERSIONED = 610, "proposals.knowledge.versioned"
    # 7xx policy
    HOOK_DENIED = 700, "policy.hook.denied"
    HOOK_ERROR = 701, "policy.hook.error"
    BUDGET_ACCOUNTING_INCOMPLETE = 710, "policy.budget.accounting_incomplete"
    TRIPWIRE_REFUSED = 720, "policy.tripwire.refused"


_BY_LABEL = {kind.label: kind for kind in AuditKind}


def kind_for_label(label: str) -> AuditKind:
    """The kind whose dotted label is ``label``; ``KeyError`` names the unknown label."""
    try:
        return _BY_LABEL[label]
    except KeyError:
        raise KeyError(f"unknown audit kind label {label!r}") from None


# The live admin topics a kind's committed row announces (``skald.core.live``): the queues and homes
# follow approvals, runs and cases, proposals; the auditor's chain panel follows every row of those
# and the heads. Loop and tool-call rows (2xx, 3xx) announce nothing here: the run page follows them
# on the session's own websocket. One loop row does: a new session, for the console's session list;
# and an approval asked for or answered also tells the session list (its "waiting for an approver"
# badges), which an operator follows without the approvals topic (the notice names nothing).
_LIVE_TOPICS_BY_BAND: dict[int, tuple[str, ...]] = {
    1: ("audit",), 4: ("approvals", "audit"), 5: ("runs", "audit"), 6: ("proposals", "audit"),
}
_LIVE_TOPICS_BY_KIND: dict[AuditKind, tuple[str, ...]] = {
    AuditKind.SESSION_CREATED: ("sessions",),
    **{kind: ("approvals", "sessions", "audit") for kind in (
        AuditKind.APPROVAL_REQUESTED, AuditKind.APPROVAL_RESOLVED, AuditKind.APPROVAL_EXPIRED)},
}


def live_topics(kind: AuditKind) -> tuple[str, ...]:
    """The live topics a committed row of ``kind`` announces (none for most loop rows)."""
    return _LIVE_TOPICS_BY_KIND.get(kind) or _LIVE_TOPICS_BY_BAND.get(int(kind) // 100, ())
