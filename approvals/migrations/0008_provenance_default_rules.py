"""The injection-provenance default rules (issue 30), for databases seeded before them: in a tainted
frame a call that is not read-only requires approval; a call with an argument from a result with a
suspected injection requires an approval that acknowledges its provenance. A frozen copy of
``approvals.rules.seed.PROVENANCE_DEFAULT_RULES``; a rule already present (same pattern and
matchers) is left alone, so an operator's edits are never overwritten.
"""

from django.db import migrations

PROVENANCE_DEFAULT_RULES = [
    ("*", {"$provenance.tainted": "true", "$provenance.read_only": "false"}, "require", 100,
     "default: in a tainted frame, a call that is not read-only needs approval"),
    ("*", {"$provenance.argument_from_suspect": "true"}, "require", 90,
     "default: an argument from a result with a suspected injection: approved only with its provenance "
     "acknowledged"),
]


def add_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    if not ApprovalRule.objects.exists():
        return  # an empty table is seeded whole by default_rules_ensure
    for pattern, matchers, action, priority, note in PROVENANCE_DEFAULT_RULES:
        if not ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, arg_matchers=matchers).exists():
            ApprovalRule.objects.create(tool_pattern=pattern, arg_matchers=matchers, action=action,
                                        priority=priority, note=note)


def remove_rules(apps, schema_editor):
    ApprovalRule = apps.get_model("approvals", "ApprovalRule")
    for pattern, matchers, action, priority, note in PROVENANCE_DEFAULT_RULES:
        ApprovalRule.objects.filter(group__isnull=True, tool_pattern=pattern, action=action, priority=priority,
                                    note=note).delete()


class Migration(migrations.Migration):
    dependencies = [("approvals", "0007_provenance")]
    operations = [migrations.RunPython(add_rules, remove_rules)]
