"""The live governance configuration as a :class:`PolicyDoc` (a selector: nine queries)."""

from __future__ import annotations

from approvals.models import ApprovalRule, SecurityGroup, TripwireAllowEntry, TripwirePattern
from approvals.policy_doc.document import (
    AgentDoc,
    AllowDoc,
    GroupDoc,
    McpServerDoc,
    PatternDoc,
    PolicyDoc,
    RuleDoc,
    SubscriptionDoc,
    policy_doc,
)
from skald.mcp.models import McpServer
from skald.models import Agent
from skald.notifications.models import Subscription


def _rule_doc(rule: ApprovalRule) -> RuleDoc:
    matchers = rule.arg_matchers if isinstance(rule.arg_matchers, dict) else {}
    return RuleDoc(
        tool=rule.tool_pattern, action=rule.action, priority=rule.priority,
        args=tuple(sorted((str(k), str(v)) for k, v in matchers.items())),
        approval_ttl=int(rule.approval_ttl.total_seconds()) if rule.approval_ttl is not None else None,
        enabled=rule.enabled, note=rule.note, row_id=rule.pk,
    )


def policy_live() -> PolicyDoc:
    """Everything the document covers, as it is now, in canonical order (each item knows its row id)."""
    by_group: dict[int | None, list[RuleDoc]] = {None: []}
    for rule in ApprovalRule.objects.order_by("priority", "id"):
        by_group.setdefault(rule.group_id, []).append(_rule_doc(rule))
    groups = [
        GroupDoc(name=group.name, description=group.description,
                 users=tuple(user.get_username() for user in group.users.all()),
                 agents=tuple(agent.name for agent in group.agents.all()),
                 rules=tuple(by_group.get(group.pk, ())), row_id=group.pk)
        for group in SecurityGroup.objects.prefetch_related("users", "agents").order_by("name")
    ]
    patterns = [PatternDoc(name=p.name, regex=p.regex, keywords=p.keywords, enabled=p.enabled, note=p.note,
                           row_id=p.pk) for p in TripwirePattern.objects.order_by("name")]
    allow = [AllowDoc(regex=a.regex, reason=a.reason, enabled=a.enabled, row_id=a.pk)
             for a in TripwireAllowEntry.objects.order_by("id")]
    agents = [
        AgentDoc(name=agent.name, tools=tuple(str(t) for t in agent.allowed_tools or ()),
                 bounds=tuple(sorted((agent.bounds or {}).items())),
                 exec_allowlist=None if agent.exec_allowlist is None else tuple(str(p) for p in agent.exec_allowlist),
                 row_id=agent.pk)
        for agent in Agent.objects.order_by("name")
    ]
    servers = [mcp_server_doc(server) for server in McpServer.objects.order_by("name")]
    subscriptions = [subscription_doc(s) for s in Subscription.objects.filter(owner__isnull=True).order_by("id")]
    return policy_doc(rules=by_group[None], groups=groups, patterns=patterns, allow=allow, agents=agents,
                      mcp_servers=servers, subscriptions=subscriptions)


def subscription_doc(subscription: Subscription) -> SubscriptionDoc:
    return SubscriptionDoc(
        name=subscription.name, channel=subscription.channel, target=subscription.target,
        events=tuple(sorted(str(e) for e in subscription.events or ())), security_group=subscription.security_group,
        agent=subscription.agent, case=subscription.case, min_risk=subscription.min_risk,
        escalate_after_minutes=subscription.escalate_after_minutes, chain_order=subscription.chain_order,
        enabled=subscription.enabled, row_id=subscription.pk)


def mcp_server_doc(server: McpServer) -> McpServerDoc:
    secrets = server.secret_env if server.transport == "stdio" else server.secret_headers
    return McpServerDoc(name=server.name, transport=server.transport, argv=tuple(str(a) for a in server.argv or ()),
                        url=server.url, secrets=tuple(sorted((str(k), str(v)) for k, v in (secrets or {}).items())),
                        trust=server.trust, agents=tuple(sorted(str(a) for a in server.agents or ())),
                        enabled=server.enabled, row_id=server.pk)
