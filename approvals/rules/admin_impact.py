"""The admin's impact previews (issue 32): what an edit on a rule's page or a security group's page
would have decided differently over the recorded calls, in words and as the JSON the pages' live
preview reads, and the group page's form that asks for a confirmation before a looser gate."""

from __future__ import annotations

from typing import Any

from django import forms
from django.forms.models import BaseInlineFormSet, inlineformset_factory

from approvals.models import ApprovalRule, SecurityGroup
from approvals.policy_doc.document import GroupDoc, RuleDoc
from approvals.policy_doc.impact import Impact
from approvals.policy_doc.rule_preview import group_change_impact, rule_doc

CONFIRM_LABEL = "Confirm a looser gate"
CONFIRM_HELP = ("Needed only when the preview says this change would have let recorded calls through with less "
                "restriction.")


def loosening_sentence(impact: Impact) -> str:
    """"This change would have let 41 calls from 3 users run with less restriction in the last 7 days …"."""
    users = f"{len(impact.users)} user" + ("" if len(impact.users) == 1 else "s")
    calls = f"{impact.loosened} call" + ("" if impact.loosened == 1 else "s")
    loosening = ", ".join(f"{count} {name}" for name, count in impact.transitions.items())
    return (f"This change would have let {calls} from {users} run with less restriction in the last {impact.days} "
            f"days ({loosening}).")


def impact_state(impact: Impact) -> str:
    return "loosens" if impact.loosened else "tightens" if impact.tightened else "same"


def impact_text(impact: Impact) -> str:
    return loosening_sentence(impact) if impact.loosened else " ".join(impact.words()[:2])


def impact_answer(form: forms.BaseForm) -> dict[str, Any]:
    """The live preview's answer for a bound form: validating it runs the preview and saves nothing."""
    form.is_valid()
    impact: Impact | None = getattr(form, "impact", None)
    if impact is None:
        return {"state": "invalid", "text": "Correct the form to see its impact on recorded calls."}
    return {"state": impact_state(impact), "text": impact_text(impact), "impact": impact.as_dict()}


RULE_FIELDS = ["priority", "tool_pattern", "action", "arg_matchers", "approval_ttl", "enabled", "note"]


def group_rules_formset(form_class: type[forms.ModelForm]) -> type[BaseInlineFormSet]:
    """The group page's inline rules as a formset (the admin's inline uses the same form and fields)."""
    return inlineformset_factory(SecurityGroup, ApprovalRule, form=form_class, fields=RULE_FIELDS, extra=0)


class SecurityGroupForm(forms.ModelForm):
    """The security group page's form: before saving, the impact of the edit — members and inline
    rules together — on the last week's recorded calls. A looser gate saves only once confirmed.

    The inline rules arrive in the same POST; the form reads them through the inline's own formset
    (prefix ``rules``) so the preview sees exactly what the save would write."""

    confirm_loosening = forms.BooleanField(required=False, label=CONFIRM_LABEL, help_text=CONFIRM_HELP)
    rule_form: type[forms.ModelForm] | None = None  # set by the admin: the inline's rule form

    class Meta:
        model = SecurityGroup
        fields = ["name", "description", "users", "agents"]

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        if self.errors or self.rule_form is None:
            return cleaned
        rules = group_rules_formset(self.rule_form)(self.data, instance=self.instance, prefix="rules")
        if not rules.is_valid():
            return cleaned  # the inline reports its own errors; the preview waits for a valid edit
        kept: list[RuleDoc] = []
        for form in rules.forms:
            values = form.cleaned_data
            if not values or values.get("DELETE"):
                continue
            kept.append(rule_doc(values))
        group = GroupDoc(name=str(cleaned.get("name", "")).strip(), description=cleaned.get("description", ""),
                         users=tuple(sorted(u.get_username() for u in cleaned.get("users") or ())),
                         agents=tuple(sorted(a.name for a in cleaned.get("agents") or ())), rules=tuple(kept))
        self.impact = group_change_impact(group_id=self.instance.pk, group=group)
        if self.impact.loosened and not cleaned.get("confirm_loosening"):
            self.add_error(None, loosening_sentence(self.impact) + f" Tick '{CONFIRM_LABEL}' and save again.")
        return cleaned
