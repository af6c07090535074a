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


# MCP tools (issue 29, docs/mcp.md): every one needs approval, except a tool annotated read-only on
# a trusted server. ``$mcp.…`` matchers read what Skald pinned of the tool, never the model's
# arguments (approvals.rules.engine, rule 5). Migration 0005 keeps a frozen copy.
MCP_DEFAULT_RULES: tuple[tuple[str, dict[str, str], str, int, str], ...] = (
    ("mcp__*", {}, RuleAction.REQUIRE.value, DEFAULT_PRIORITY, "default: an MCP tool needs approval"),
    ("mcp__*", {"$mcp.readOnlyHint": "true", "$mcp.trust": "trusted"}, RuleAction.ALLOW.value, DEFAULT_PRIORITY - 10,
     "default: a read-only tool of a trusted MCP server"),
)


# Injection provenance (issue 30, docs/provenance.md). ``$provenance.…`` matchers read what the kernel
# derived from stored rows; these global rules form their own set (approvals.rules.selectors
# PROVENANCE_SET), so they only ever tighten. The second is the "denied unless an approver approves
# it with the provenance in front of them": a ``require`` whose approval is refused without
# ``provenance_acknowledged`` (approvals.pending.services). Migration 0008 keeps a frozen copy.
PROVENANCE_DEFAULT_RULES: tuple[tuple[str, dict[str, str], str, int, str], ...] = (
    ("*", {"$provenance.tainted": "true", "$provenance.read_only": "false"}, RuleAction.REQUIRE.value,
     DEFAULT_PRIORITY, "default: in a tainted frame, a call that is not read-only needs approval"),
    ("*", {"$provenance.argument_from_suspect": "true"}, RuleAction.REQUIRE.value, DEFAULT_PRIORITY - 10,
     "default: an argument from a result with a suspected injection: approved only with its provenance "
     "acknowledged"),
    ("*", {"$provenance.injection_suspected": "true"}, RuleAction.REQUIRE.value, DEFAULT_PRIORITY,
     "default: once a suspected injection is in the frame, every call needs approval, reads too"),
)


DEFAULT_RULE_COUNT = len(DEFAULT_RULES) + len(MCP_DEFAULT_RULES) + len(PROVENANCE_DEFAULT_RULES)


def default_rules_ensure() -> int:
    """Create the default global rules if there are no rules at all; returns how many were made."""
    with transaction.atomic():
        if ApprovalRule.objects.exists():
            return 0
        ApprovalRule.objects.bulk_create(
            [*(ApprovalRule(tool_pattern=pattern, action=action, priority=priority, note=note)
               for pattern, action, priority, note in DEFAULT_RULES),
             *(ApprovalRule(tool_pattern=pattern, arg_matchers=matchers, action=action, priority=priority, note=note)
               for pattern, matchers, action, priority, note in (*MCP_DEFAULT_RULES, *PROVENANCE_DEFAULT_RULES))]
        )
        audit_append(
            actor=Actor.system("seed"),
            kind=AuditKind.RULE_CHANGED,
            subject_type="approval_rule",
            subject_id="defaults",
            payload={"seeded": [[pattern, action, priority] for pattern, action, priority, _ in DEFAULT_RULES]
                     + [[pattern, matchers, action, priority] for pattern, matchers, action, priority, _
                        in (*MCP_DEFAULT_RULES, *PROVENANCE_DEFAULT_RULES)]},
        )
    return DEFAULT_RULE_COUNT


# The demo's own configuration (make run), not a default: an operator's narrow rule that lets the
# troubleshooter delegate to the read-only log analyst without a human, so the demo shows a nested
# run and an async task. Everything else about delegation stays behind approval.
DEMO_RULES: tuple[tuple[str, dict[str, str], str, int, str], ...] = (
    ("execute_task", {"agent": "log-analyst"}, RuleAction.ALLOW.value, 50,
     "demo: delegating to the read-only log analyst needs no approval"),
)


def demo_rules_ensure() -> int:
    """Create the demo's rules that are missing (by pattern and matchers); returns how many."""
    made = 0
    with transaction.atomic():
        for pattern, matchers, action, priority, note in DEMO_RULES:
            if ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, arg_matchers=matchers).exists():
                continue
            ApprovalRule.objects.create(tool_pattern=pattern, arg_matchers=matchers, action=action,
                                        priority=priority, note=note)
            made += 1
        if made:
            audit_append(actor=Actor.system("seed"), kind=AuditKind.RULE_CHANGED, subject_type="approval_rule",
                         subject_id="demo", payload={"seeded": [[p, m, a, pr] for p, m, a, pr, _ in DEMO_RULES]})
    return made
