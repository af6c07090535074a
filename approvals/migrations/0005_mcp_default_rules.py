"""The MCP default rules (issue 29), for databases seeded before them: every MCP tool requires
approval; a tool annotated read-only on a trusted server is allowed. A frozen copy of
``approvals.rules.seed.MCP_DEFAULT_RULES``; a rule already present (same pattern and matchers) is
left alone, so an operator's edits are never overwritten.
"""

from django.db import migrations

MCP_DEFAULT_RULES = [
    ("mcp__*", {}, "require", 100, "default: an MCP tool needs approval"),
    ("mcp__*", {"$mcp.readOnlyHint": "true", "$mcp.trust": "trusted"}, "allow", 90,
     "default: a read-only tool of a trusted MCP server"),
]


def add_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    if not ApprovalRule.objects.exists():
        return  # an empty table is seeded whole by default_rules_ensure
    for pattern, matchers, action, priority, note in MCP_DEFAULT_RULES:
        if not ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, arg_matchers=matchers).exists():
            ApprovalRule.objects.create(tool_pattern=pattern, arg_matchers=matchers, action=action,
                                        priority=priority, note=note)


def remove_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    for pattern, matchers, action, priority, note in MCP_DEFAULT_RULES:
        ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, action=action, priority=priority,
                                    note=note).delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0004_known_tool_mcp")]
    operations = [migrations.RunPython(add_rules, remove_rules)]
