"""Seed the default global approval rules on first boot (SPEC A1).

A frozen copy of ``approvals.rules.seed.DEFAULT_RULES``: migrations must not import code that changes.
Only an empty rule table is seeded, so re-running never overwrites an operator's configuration.
"""

from django.db import migrations

DEFAULT_RULES = [
    ("search_knowledge", "allow", 100, "default: read-only tool"),
    ("read_logs", "allow", 100, "default: read-only tool"),
    ("read_file", "allow", 100, "default: read-only tool"),
    ("propose_knowledge", "allow", 100, "default: read-only tool"),
    ("list_agents", "allow", 100, "default: read-only tool"),
    ("scratchpad_get", "allow", 100, "default: session scratchpad"),
    ("scratchpad_set", "allow", 100, "default: session scratchpad"),
    ("ask_human", "allow", 100, "default: a handoff to a human, not an action"),
    ("write_file", "require", 100, "default: file write"),
    ("execute_cmd", "require", 100, "default: command execution"),
    ("execute_task", "require", 100, "default: delegation"),
    ("execute_subtask", "require", 100, "default: delegation"),
    ("*", "require", 999999, "default: catch-all, gates anything not allowed"),
]


def seed_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    if ApprovalRule.objects.exists():
        return
    ApprovalRule.objects.bulk_create(
        ApprovalRule(tool_pattern=pattern, action=action, priority=priority, note=note)
        for pattern, action, priority, note in DEFAULT_RULES
    )


def unseed_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    for pattern, action, priority, note in DEFAULT_RULES:
        ApprovalRule.objects.filter(
            group__isnull=True, tool_pattern=pattern, action=action, priority=priority, note=note
        ).delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0001_initial")]
    operations = [migrations.RunPython(seed_rules, unseed_rules)]
