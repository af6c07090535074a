"""Approval reads: the rule sets a call's scope selects, and every tool an operator can gate."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Q

from approvals.models import ApprovalRule, KnownTool, SecurityGroup, ToolCategory
from approvals.rules.engine import RuleSet, RuleView
from skald.models import Agent
from skald.plugins import sockets

GLOBAL_SET = "global"
# Global rules that read ``$provenance.*`` facts form their own set after the global one: across sets
# the most restrictive contribution wins, so a provenance rule can only tighten what the other rules
# decide, never widen it (a provenance "require" never softens a "deny"; docs/provenance.md).
PROVENANCE_SET = "global:provenance"


def reads_provenance(rule: RuleView) -> bool:
    return isinstance(rule.arg_matchers, dict) and any(
        isinstance(path, str) and path.startswith("$provenance.") for path in rule.arg_matchers)

# Tools the loop injects outside the registry (the seed's ``synthetic_tools()``): without this list
# they could not be configured before a model is first offered them.
INTERFACE_TOOLS: tuple[tuple[str, str], ...] = (
    ("ask_human", "Hand the run to a human when stuck (a handoff, not an action)."),
    ("execute_task", "Delegate a task to a sub-agent (sync or async)."),
    ("execute_subtask", "Delegate a subtask to a sub-agent within the current task."),
    ("list_agents", "List the task agents a run can delegate to."),
    ("cron", "Create, list or cancel cron jobs that run a task agent on a schedule."),
)


def group_set_name(name: str) -> str:
    return f"group:{name}"


def rule_view(rule: ApprovalRule) -> RuleView:
    """An ORM rule as the engine's plain value (``group`` must be loaded with it)."""
    group = rule.group
    return RuleView(
        id=rule.pk,
        group_id=rule.group_id,
        group_name=group.name if group is not None else None,
        tool_pattern=rule.tool_pattern,
        arg_matchers=rule.arg_matchers,
        action=rule.action,
        priority=rule.priority,
        enabled=rule.enabled,
        approval_ttl=int(rule.approval_ttl.total_seconds()) if rule.approval_ttl is not None else None,
        note=rule.note,
    )


def rule_sets_for(*, user_id: int | None, agent: str | None) -> list[RuleSet]:
    """The global set, then one set per group the user or agent belongs to (by group name).

    Two queries whatever the number of groups and rules. Each set's rules are ordered by
    (priority, id), which is how the engine breaks exact ties.
    """
    membership = Q(pk__in=[])
    if user_id is not None:
        membership |= Q(users__id=user_id)
    if agent:
        membership |= Q(agents__name=agent)
    groups = list(SecurityGroup.objects.filter(membership).distinct().order_by("name").values_list("id", "name"))
    group_ids = [group_id for group_id, _ in groups]
    rules = (
        ApprovalRule.objects.filter(Q(group__isnull=True) | Q(group_id__in=group_ids))
        .select_related("group")
        .order_by("priority", "id")
    )
    by_group: dict[int | None, list[RuleView]] = {None: [], **{group_id: [] for group_id in group_ids}}
    for rule in rules:
        by_group[rule.group_id].append(rule_view(rule))
    global_rules = [rule for rule in by_group[None] if not reads_provenance(rule)]
    provenance_rules = [rule for rule in by_group[None] if reads_provenance(rule)]
    return [RuleSet(GLOBAL_SET, tuple(global_rules))] + [
        RuleSet(group_set_name(name), tuple(by_group[group_id])) for group_id, name in groups
    ] + ([RuleSet(PROVENANCE_SET, tuple(provenance_rules))] if provenance_rules else [])


def tools_catalog() -> list[dict[str, Any]]:
    """Registry tools, interface tools and every tool ever offered to a model, deduplicated.

    A name appears once, under the first category that knows it: registry, interface, then the
    category a known tool was recorded with (``dynamic``, or ``mcp`` for an MCP server's tool).
    One query (the known tools).
    """
    catalog: dict[str, dict[str, Any]] = {}

    def add(name: str, category: str, description: str) -> None:
        catalog.setdefault(name, {"name": name, "category": category, "description": description})

    for spec in sockets.tools.specs():
        add(spec.name, ToolCategory.REGISTRY.value, spec.description)
    for name, description in INTERFACE_TOOLS:
        add(name, ToolCategory.INTERFACE.value, description)
    for name, category, description in KnownTool.objects.order_by("name").values_list("name", "category",
                                                                                      "description"):
        add(name, category or ToolCategory.DYNAMIC.value, description)
    return list(catalog.values())


def user_id_resolve(ref: str) -> int | None:
    """A user's id from a username (first) or a numeric id; ``None`` when there is no such user."""
    users = get_user_model().objects
    found = users.filter(username=ref).values_list("pk", flat=True).first()
    if found is None and ref.isascii() and ref.isdecimal():
        found = users.filter(pk=int(ref)).values_list("pk", flat=True).first()
    return found


def agent_exists(name: str) -> bool:
    return Agent.objects.filter(name=name).exists()
