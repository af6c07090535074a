"""The impact of one edit in the admin (issue 32): the live policy with that one rule, or that one
security group (its members and its rules), changed, compared with the live policy itself over the
recorded gate decisions."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

from approvals.policy_doc.document import GroupDoc, PolicyDoc, RuleDoc, policy_doc
from approvals.policy_doc.history import DEFAULT_DAYS, recorded_decisions
from approvals.policy_doc.impact import Impact, impact_between
from approvals.policy_doc.live import policy_live


def rule_doc(values: Mapping[str, Any]) -> RuleDoc:
    """A rule form's cleaned values (the rule page's, or one inline row of a group's page) as a
    document rule."""
    ttl: timedelta | None = values.get("approval_ttl")
    matchers = values.get("arg_matchers") or {}
    return RuleDoc(tool=str(values["tool_pattern"]).strip(), action=values["action"], priority=values["priority"],
                   args=tuple(sorted((str(k), str(v)) for k, v in matchers.items())),
                   approval_ttl=int(ttl.total_seconds()) if ttl is not None else None,
                   enabled=values.get("enabled", False), note=values.get("note", ""))


def with_rule(live: PolicyDoc, *, rule_id: int | None, group: str | None, rule: RuleDoc | None) -> PolicyDoc:
    """``live`` with rule ``rule_id`` removed (when given) and ``rule`` added to ``group``'s set (when given)."""

    def keep(rules: tuple[RuleDoc, ...], name: str | None) -> list[RuleDoc]:
        kept = [r for r in rules if rule_id is None or r.row_id != rule_id]
        return [*kept, rule] if rule is not None and name == group else kept

    groups = [replace(g, rules=tuple(keep(g.rules, g.name))) for g in live.groups]
    if rule is not None and group is not None and group not in {g.name for g in live.groups}:
        groups.append(GroupDoc(name=group, rules=(rule,)))
    return policy_doc(rules=keep(live.rules, None), groups=groups, patterns=live.patterns, allow=live.allow,
                      agents=live.agents, mcp_servers=live.mcp_servers)


def rule_change_impact(*, rule_id: int | None, group: str | None, rule: RuleDoc | None,
                       days: int = DEFAULT_DAYS) -> Impact:
    """What saving this rule (``rule`` None: deleting rule ``rule_id``) would have changed over the
    last ``days`` days of recorded calls, against the live policy."""
    live = policy_live()
    history = recorded_decisions(days=days)
    return impact_between(history.decisions, live, with_rule(live, rule_id=rule_id, group=group, rule=rule),
                          days=days)


def with_group(live: PolicyDoc, *, group_id: int | None, group: GroupDoc) -> PolicyDoc:
    """``live`` with group ``group_id`` (when given) replaced by ``group`` (its members and rules)."""
    groups = [g for g in live.groups if group_id is None or g.row_id != group_id]
    return policy_doc(rules=live.rules, groups=[*groups, group], patterns=live.patterns, allow=live.allow,
                      agents=live.agents, mcp_servers=live.mcp_servers)


def group_change_impact(*, group_id: int | None, group: GroupDoc, days: int = DEFAULT_DAYS) -> Impact:
    """What saving this security group (members and rules as edited) would have changed over the last
    ``days`` days of recorded calls, against the live policy."""
    live = policy_live()
    history = recorded_decisions(days=days)
    return impact_between(history.decisions, live, with_group(live, group_id=group_id, group=group), days=days)
