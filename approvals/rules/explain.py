"""The rules' "test a call" page and the never-wins warnings (issue 13: rules you can trust).

``test a call`` runs :func:`approvals.rules.policy.decide` — exactly what the gate runs — for a user, an
agent, a tool and arguments, and shows the decision with the engine's trace. Nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib.auth import get_user_model

from approvals.models import ApprovalRule
from approvals.rules.engine import RuleSet, RuleView
from approvals.rules.lint import rule_warnings
from approvals.rules.policy import PROVENANCE_FLAGS, decide
from approvals.rules.selectors import GLOBAL_SET, PROVENANCE_SET, group_set_name, reads_provenance, rule_view
from skald.models import Agent

PRECEDENCE = ("Within a rule set (the global rules, and each security group of the call's user or agent) the "
              "enabled matching rule with the lowest priority number decides; at equal priority deny beats "
              "require beats allow. Across sets the most restrictive answer wins, so a security group can only "
              "tighten the global rules, never widen them. No matching rule, or no user and no agent, denies. "
              "Seeded rules use priority 100 and the catch-all '*' 999999: give a new rule 100 to sit beside "
              "them, a smaller number to take precedence over them.")


class TestCallForm(forms.Form):
    user = forms.ModelChoiceField(queryset=get_user_model().objects.order_by("username"), required=False,
                                  to_field_name="username", help_text="Whose turn makes the call.")
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"), required=False, to_field_name="name",
                                   help_text="The agent making the call (its security groups count too).")
    tool = forms.CharField(max_length=128)
    args = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 60}), initial="{}", required=False,
                           help_text='The call\'s arguments as a JSON object, e.g. {"path": "reports/x.md"}.')

    # Injection provenance (docs/provenance.md): what the kernel would derive for a real call.
    tainted = forms.BooleanField(required=False, help_text="The call's frame has read untrusted content.")
    read_only = forms.BooleanField(required=False, help_text="The tool is read-only.")
    argument_from_untrusted = forms.BooleanField(required=False,
                                                 help_text="An argument value occurs in an untrusted result.")
    injection_suspected = forms.BooleanField(required=False,
                                             help_text="An untrusted result in the frame has a suspected injection.")
    argument_from_suspect = forms.BooleanField(required=False,
                                               help_text="An argument came from a result with a suspected injection.")

    def clean_args(self) -> dict[str, Any]:
        try:
            parsed = json.loads(self.cleaned_data["args"] or "{}")
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None
        if not isinstance(parsed, dict):
            raise forms.ValidationError("The arguments must be a JSON object.")
        return parsed

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        if not cleaned.get("user") and not cleaned.get("agent"):
            raise forms.ValidationError("Choose a user or an agent: a call with neither has no scope and is denied.")
        return cleaned

    def decide(self) -> Any:
        data = self.cleaned_data
        provenance = {name: bool(data.get(name)) for name in PROVENANCE_FLAGS}
        provenance["tainted"] = any(provenance[name] for name in PROVENANCE_FLAGS if name != "read_only")
        return decide(tool=data["tool"], args=data["args"], user_id=data["user"].pk if data["user"] else None,
                      agent=data["agent"].name if data["agent"] else None, provenance=provenance)



def all_rule_sets() -> list[RuleSet]:
    """Every set at once (global and each group), in the engine's order: one query."""
    sets: dict[str, list[RuleView]] = {GLOBAL_SET: []}
    for rule in ApprovalRule.objects.select_related("group").order_by("priority", "id"):
        view = rule_view(rule)
        name = group_set_name(rule.group.name) if rule.group is not None else (
            PROVENANCE_SET if reads_provenance(view) else GLOBAL_SET)
        sets.setdefault(name, []).append(view)
    return [RuleSet(name, tuple(rules)) for name, rules in sets.items()]


def never_wins() -> dict[int, list[str]]:
    """Rule id → why it can never decide a call (only rules with a warning)."""
    sets = all_rule_sets()
    found: dict[int, list[str]] = {}
    for rule_set in sets:
        for rule in rule_set.rules:
            warnings = rule_warnings(rule, sets, global_set=GLOBAL_SET)
            if warnings and rule.id is not None:
                found[rule.id] = warnings
    return found
