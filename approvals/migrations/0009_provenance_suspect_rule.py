"""The third injection-provenance default rule (issue 30), for databases seeded before it: once a
suspected injection is in the frame, every call needs approval, reads too (an attacker's read-only
calls, measured against AgentDojo: docs/provenance.md). A frozen copy of the last entry of
``approvals.rules.seed.PROVENANCE_DEFAULT_RULES``; a rule already present (same pattern and matchers)
is left alone, so an operator's edits are never overwritten.
"""

from django.db import migrations

SUSPECT_RULE = ("*", {"$provenance.injection_suspected": "true"}, "require", 100,
                "default: once a suspected injection is in the frame, every call needs approval, reads too")


def add_rule(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    if not ApprovalRule.objects.exists():
        return  # an empty table is seeded whole by default_rules_ensure
    pattern, matchers, action, priority, note = SUSPECT_RULE
    if not ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, arg_matchers=matchers).exists():
        ApprovalRule.objects.create(tool_pattern=pattern, arg_matchers=matchers, action=action, priority=priority,
                                    note=note)


def remove_rule(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    pattern, matchers, action, priority, note = SUSPECT_RULE
    ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, action=action, priority=priority,
                                note=note).delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0008_provenance_default_rules")]
    operations = [migrations.RunPython(add_rule, remove_rule)]
