"""Conditional writes of rules and groups for the policy API (issue 32): look up, lock, compare the
ETag, then write through the admin's own services (``approval_rule_save`` … ``security_group_delete``),
all in one transaction.

The row is locked (``SELECT … FOR UPDATE``; SQLite's IMMEDIATE transactions serialise every writer)
before its ETag is compared, so two writers holding the same ETag make one winner: the second reads
the first's result and answers ``412 precondition_failed``. A group's ETag covers its rules too
(deleting it deletes them), so a group write also locks its rules, and a rule written into a group
locks that group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from approvals.models import ApprovalRule, SecurityGroup
from approvals.rules.services import (
    approval_rule_delete,
    approval_rule_save,
    rule_audit_view,
    security_group_delete,
    security_group_save,
)
from audit.actors import Actor
from skald.core.api.conditional import etag_of, precondition_check
from skald.core.errors import Conflict, NotFound
from skald.models import Agent

# What a caller may set on a rule, as the API names it (``approval_ttl`` in seconds, ``group`` by name).
RULE_INPUT = ("group", "tool_pattern", "arg_matchers", "action", "priority", "approval_ttl", "enabled", "note")
GROUP_INPUT = ("name", "description", "users", "agents")
GROUP_PREFETCH = ("users", "agents", "rules")


# --- views and ETags ---------------------------------------------------------------------------

def rule_etag(rule: ApprovalRule) -> str:
    """The rule's ETag: its audited view (``hit_count`` is not in it: the gate bumps it on every call)."""
    return etag_of(rule_audit_view(rule))


def rule_view(rule: ApprovalRule) -> dict[str, Any]:
    return {**rule_audit_view(rule), "hit_count": rule.hit_count}


def group_view(group: SecurityGroup, rules: Iterable[ApprovalRule] | None = None) -> dict[str, Any]:
    """The group with its members (by name) and its rules, as the API shows it and its ETag covers.

    Reads ``.all()`` of each relation, so a list prefetched with :data:`GROUP_PREFETCH` costs no query.
    """
    listed = rules if rules is not None else group.rules.all()
    return {
        "id": group.pk,
        "name": group.name,
        "description": group.description,
        "users": sorted(user.get_username() for user in group.users.all()),
        "agents": sorted(agent.name for agent in group.agents.all()),
        "rules": [rule_audit_view(rule) for rule in sorted(listed, key=lambda r: (r.priority, r.pk))],
    }


def group_etag(view: Mapping[str, Any]) -> str:
    return etag_of(view)


# --- rules -------------------------------------------------------------------------------------

def approval_rule_create(*, actor: Actor, fields: Mapping[str, Any]) -> ApprovalRule:
    """A new rule (global unless ``fields["group"]`` names a group) through ``approval_rule_save``.

    Raises:
        NotFound: ``group_unknown`` (404), no group has that name.
        SkaldError: ``rule_invalid`` (400), the service's own checks.
    """
    with transaction.atomic():
        rule = ApprovalRule()
        _rule_set(rule, fields)
        return approval_rule_save(actor=actor, rule=rule, changed=["created"])


def approval_rule_update(*, actor: Actor, rule_id: int, if_match: tuple[str, ...],
                         fields: Mapping[str, Any]) -> ApprovalRule:
    """Change the fields given, if the rule is still the version ``if_match`` names.

    Raises:
        NotFound: ``rule_not_found`` or ``group_unknown`` (404).
        PreconditionFailed: ``precondition_failed`` (412), the rule changed since it was read.
    """
    with transaction.atomic():
        rule = _rule_locked(rule_id)
        precondition_check(if_match, rule_etag(rule))
        before = rule_audit_view(rule)
        _rule_set(rule, fields)
        after = rule_audit_view(rule)
        changed = [name for name in RULE_INPUT if before[name] != after[name]]
        if not changed:
            return rule  # nothing to write, nothing to audit
        return approval_rule_save(actor=actor, rule=rule, changed=changed)


def approval_rule_remove(*, actor: Actor, rule_id: int, if_match: tuple[str, ...]) -> dict[str, Any]:
    """Delete the rule, if it is still the version ``if_match`` names (``rule_not_found``, 412);
    returns what it was."""
    with transaction.atomic():
        rule = _rule_locked(rule_id)
        precondition_check(if_match, rule_etag(rule))
        view = rule_view(rule)
        approval_rule_delete(actor=actor, rule=rule)
        return view


def rule_get(rule_id: int) -> ApprovalRule:
    rule = ApprovalRule.objects.select_related("group").filter(pk=rule_id).first()
    if rule is None:
        raise NotFound(f"No approval rule has id {rule_id}.", code="rule_not_found")
    return rule


def _rule_locked(rule_id: int) -> ApprovalRule:
    # No select_related: PostgreSQL refuses FOR UPDATE on the nullable side of an outer join.
    rule = ApprovalRule.objects.select_for_update().filter(pk=rule_id).first()
    if rule is None:
        raise NotFound(f"No approval rule has id {rule_id}.", code="rule_not_found")
    return rule


def _rule_set(rule: ApprovalRule, fields: Mapping[str, Any]) -> None:
    for name, value in fields.items():
        if name == "group":
            rule.group = _group_by_name_locked(value) if value is not None else None
        elif name == "approval_ttl":
            rule.approval_ttl = timedelta(seconds=value) if value is not None else None
        elif name in RULE_INPUT:
            setattr(rule, name, value)


def _group_by_name_locked(name: str) -> SecurityGroup:
    group = SecurityGroup.objects.select_for_update().filter(name=name).first()
    if group is None:
        raise NotFound(f"No security group is named {name!r}.", code="group_unknown", group=name)
    return group


# --- groups ------------------------------------------------------------------------------------

def security_group_create(*, actor: Actor, fields: Mapping[str, Any]) -> SecurityGroup:
    """A new group with its members through ``security_group_save``.

    Raises:
        Conflict: ``group_name_taken`` (409).
        NotFound: ``user_unknown`` / ``agent_unknown`` (404), a member that does not exist.
    """
    with transaction.atomic():
        _name_free(fields["name"], but=None)
        group = SecurityGroup(name=fields["name"], description=fields.get("description", ""))
        return security_group_save(actor=actor, group=group, changed=["created"],
                                   users=_users(fields.get("users", [])), agents=_agents(fields.get("agents", [])))


def security_group_update(*, actor: Actor, group_id: int, if_match: tuple[str, ...],
                          fields: Mapping[str, Any]) -> SecurityGroup:
    """Change the fields given (``users`` / ``agents`` replace the membership), if the group (with
    its rules) is still the version ``if_match`` names (``group_not_found``, 412, 409, 404 members)."""
    with transaction.atomic():
        group, rules = _group_locked(group_id)
        before = group_view(group, rules)
        precondition_check(if_match, group_etag(before))
        if "name" in fields and fields["name"] != group.name:
            _name_free(fields["name"], but=group.pk)
        users = _users(fields["users"]) if "users" in fields else None
        agents = _agents(fields["agents"]) if "agents" in fields else None
        group.name = fields.get("name", group.name)
        group.description = fields.get("description", group.description)
        changed = [name for name in ("name", "description") if before[name] != getattr(group, name)]
        if users is not None and sorted(u.get_username() for u in users) != before["users"]:
            changed.append("users")
        if agents is not None and sorted(a.name for a in agents) != before["agents"]:
            changed.append("agents")
        if not changed:
            return group
        return security_group_save(actor=actor, group=group, changed=changed, users=users, agents=agents)


def security_group_remove(*, actor: Actor, group_id: int, if_match: tuple[str, ...]) -> dict[str, Any]:
    """Delete the group and its rules, if it is still the version ``if_match`` names; returns what it was."""
    with transaction.atomic():
        group, rules = _group_locked(group_id)
        view = group_view(group, rules)
        precondition_check(if_match, group_etag(view))
        security_group_delete(actor=actor, group=group)
        return view


def group_get(group_id: int) -> SecurityGroup:
    group = SecurityGroup.objects.filter(pk=group_id).first()
    if group is None:
        raise NotFound(f"No security group has id {group_id}.", code="group_not_found")
    return group


def _group_locked(group_id: int) -> tuple[SecurityGroup, list[ApprovalRule]]:
    group = SecurityGroup.objects.select_for_update().filter(pk=group_id).first()
    if group is None:
        raise NotFound(f"No security group has id {group_id}.", code="group_not_found")
    return group, list(ApprovalRule.objects.select_for_update().filter(group=group))


def _name_free(name: str, *, but: int | None) -> None:
    taken = SecurityGroup.objects.filter(name=name)
    if but is not None:
        taken = taken.exclude(pk=but)
    if taken.exists():
        raise Conflict(f"A security group is already named {name!r}.", code="group_name_taken", name=name)


def _users(names: Iterable[str]) -> list[Any]:
    wanted = sorted(set(names))
    found = list(get_user_model().objects.filter(username__in=wanted))
    missing = sorted(set(wanted) - {user.get_username() for user in found})
    if missing:
        raise NotFound(f"No user named {missing[0]!r}.", code="user_unknown", users=missing)
    return found


def _agents(names: Iterable[str]) -> list[Agent]:
    wanted = sorted(set(names))
    found = list(Agent.objects.filter(name__in=wanted))
    missing = sorted(set(wanted) - {agent.name for agent in found})
    if missing:
        raise NotFound(f"No agent named {missing[0]!r}.", code="agent_unknown", agents=missing)
    return found
