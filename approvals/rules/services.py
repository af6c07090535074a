"""Policy writes: security groups and approval rules, each audited in the same transaction.

The admin (and any future API) calls these; nothing else saves or deletes a rule or a group.
Rules are checked here against the engine's own idea of a well-formed rule, so a rule that would
make the engine fail closed is refused at the door with a field-level message instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction

from approvals.models import ApprovalRule, RuleAction, SecurityGroup
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core.errors import SkaldError

# Saved on an existing rule. ``hit_count`` is left out: the gate increments it with F() while a
# form is open, and writing back the value the form loaded would lose those hits.
RULE_FIELDS = ("group", "tool_pattern", "arg_matchers", "action", "priority", "approval_ttl", "enabled", "note")


def approval_rule_problems(*, tool_pattern: Any, arg_matchers: Any, priority: Any, action: Any = None
                           ) -> dict[str, list[str]]:
    """Field → messages for a rule the engine could not evaluate; empty when the rule is sound.

    Pure, so that a form can show the same messages the service would raise.
    """
    problems: dict[str, list[str]] = {}
    if not isinstance(tool_pattern, str) or not tool_pattern.strip():
        problems["tool_pattern"] = ["A tool pattern is required (a tool name or a glob such as 'read_*' or '*')."]
    if not isinstance(arg_matchers, Mapping):
        problems["arg_matchers"] = [
            'Argument matchers must be a JSON object mapping argument paths to globs, e.g. {"path": "reports/*"}.'
        ]
    else:
        bad = [str(key) for key, glob in arg_matchers.items() if not isinstance(key, str) or not isinstance(glob, str)]
        if bad:
            problems["arg_matchers"] = [
                "Every argument matcher must map a path to a glob string; not a string: " + ", ".join(sorted(bad)) + "."
            ]
    if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
        problems["priority"] = ["Priority must be a whole number ≥ 0 (lower runs first)."]
    if action is not None and action not in RuleAction.values:
        problems["action"] = [f"Action must be one of {', '.join(RuleAction.values)}."]
    return problems


def rule_audit_view(rule: ApprovalRule) -> dict[str, Any]:
    """The rule as recorded in its audit rows (JSON-safe)."""
    group = rule.group if rule.group_id else None
    return {
        "id": rule.pk,
        "group": group.name if group is not None else None,
        "tool_pattern": rule.tool_pattern,
        "arg_matchers": rule.arg_matchers,
        "action": rule.action,
        "priority": rule.priority,
        "approval_ttl": int(rule.approval_ttl.total_seconds()) if rule.approval_ttl is not None else None,
        "enabled": rule.enabled,
        "note": rule.note,
    }


def approval_rule_save(*, actor: Actor, rule: ApprovalRule, changed: Iterable[str]) -> ApprovalRule:
    """Create or update one rule (global when ``rule.group`` is empty) and audit RULE_CHANGED.

    Raises:
        SkaldError: ``rule_invalid`` (400) with ``fields`` naming each problem.
    """
    problems = approval_rule_problems(tool_pattern=rule.tool_pattern, arg_matchers=rule.arg_matchers,
                                      priority=rule.priority, action=rule.action)
    if problems:
        raise SkaldError("The rule is not valid.", code="rule_invalid", http_status=400, fields=problems)
    rule.tool_pattern = rule.tool_pattern.strip()
    created = rule.pk is None
    with transaction.atomic():
        if created:
            rule.save()
        else:
            rule.save(update_fields=list(RULE_FIELDS))
        audit_append(actor=actor, kind=AuditKind.RULE_CHANGED, subject_type="approval_rule", subject_id=rule.pk,
                     payload={"created": created, "changed": sorted(set(changed)), "rule": rule_audit_view(rule)})
    return rule


def approval_rule_delete(*, actor: Actor, rule: ApprovalRule) -> None:
    """Delete one rule; the audit row keeps what it was."""
    with transaction.atomic():
        view = rule_audit_view(rule)
        subject_id = rule.pk
        rule.delete()
        audit_append(actor=actor, kind=AuditKind.RULE_CHANGED, subject_type="approval_rule", subject_id=subject_id,
                     payload={"deleted": True, "rule": view})


def security_group_save(
    *,
    actor: Actor,
    group: SecurityGroup,
    changed: Iterable[str],
    users: Iterable[Any] | None = None,
    agents: Iterable[Any] | None = None,
) -> SecurityGroup:
    """Create or update a group and, when given, set its members; audit GROUP_CHANGED.

    ``users`` / ``agents`` replace the membership (``None`` leaves it as it is): who belongs to a
    group decides which rules judge their calls, so membership is part of the audited change.
    """
    created = group.pk is None
    with transaction.atomic():
        group.save()
        if users is not None:
            group.users.set(list(users))
        if agents is not None:
            group.agents.set(list(agents))
        audit_append(actor=actor, kind=AuditKind.GROUP_CHANGED, subject_type="security_group", subject_id=group.pk,
                     payload={"created": created, "changed": sorted(set(changed)), **_group_audit_view(group)})
    return group


def security_group_delete(*, actor: Actor, group: SecurityGroup) -> None:
    """Delete a group with its rules; the audit row keeps the group, its members and its rules."""
    with transaction.atomic():
        view = _group_audit_view(group)
        rules = [rule_audit_view(rule) for rule in group.rules.select_related("group").order_by("priority", "id")]
        subject_id = group.pk
        group.delete()
        audit_append(actor=actor, kind=AuditKind.GROUP_CHANGED, subject_type="security_group", subject_id=subject_id,
                     payload={"deleted": True, **view, "rules": rules})


def _group_audit_view(group: SecurityGroup) -> dict[str, Any]:
    return {
        "name": group.name,
        "description": group.description,
        "users": sorted(group.users.values_list("pk", flat=True)),
        "agents": sorted(group.agents.values_list("name", flat=True)),
    }
