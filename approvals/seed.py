"""The default global rules (SPEC A1), seeded on first boot by ``approvals/0002_default_rules``.

``default_rules_ensure`` recreates them when the rule table is empty (tests flush the database,
``seed_demo`` calls it); it never touches a table an operator has configured.
"""

from __future__ import annotations

from django.db import transaction

from approvals.models import ApprovalRule, RuleAction
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append

CATCH_ALL_PRIORITY = 999_999
DEFAULT_PRIORITY = 100

# (tool pattern, action, priority, note). The migration keeps a frozen copy.
DEFAULT_RULES: tuple[tuple[str, str, int, str], ...] = (
    *(
        (name, RuleAction.ALLOW.value, DEFAULT_PRIORITY, "default: read-only tool")
        for name in ("search_knowledge", "read_logs", "read_file", "propose_knowledge", "list_agents")
    ),
    ("scratchpad_get", RuleAction.ALLOW.value, DEFAULT_PRIORITY, "default: session scratchpad"),
    ("scratchpad_set", RuleAction.ALLOW.value, DEFAULT_PRIORITY, "default: session scratchpad"),
    ("ask_human", RuleAction.ALLOW.value, DEFAULT_PRIORITY, "default: a handoff to a human, not an action"),
    ("write_file", RuleAction.REQUIRE.value, DEFAULT_PRIORITY, "default: file write"),
    ("execute_cmd", RuleAction.REQUIRE.value, DEFAULT_PRIORITY, "default: command execution"),
    ("execute_task", RuleAction.REQUIRE.value, DEFAULT_PRIORITY, "default: delegation"),
    ("execute_subtask", RuleAction.REQUIRE.value, DEFAULT_PRIORITY, "default: delegation"),
    ("*", RuleAction.REQUIRE.value, CATCH_ALL_PRIORITY, "default: catch-all, gates anything not allowed"),
)


def default_rules_ensure() -> int:
    """Create the default global rules if there are no rules at all; returns how many were made."""
    with transaction.atomic():
        if ApprovalRule.objects.exists():
            return 0
        ApprovalRule.objects.bulk_create(
            ApprovalRule(tool_pattern=pattern, action=action, priority=priority, note=note)
            for pattern, action, priority, note in DEFAULT_RULES
        )
        audit_append(
            actor=Actor.system("seed"),
            kind=AuditKind.RULE_CHANGED,
            subject_type="approval_rule",
            subject_id="defaults",
            payload={"seeded": [[pattern, action, priority] for pattern, action, priority, _ in DEFAULT_RULES]},
        )
    return len(DEFAULT_RULES)
