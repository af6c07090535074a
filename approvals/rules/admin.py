"""Approval rules and security groups in the admin (SPEC A1, A2): rules through their audited
services, a tool picker, a warning on a rule that can never win, and "test a call" (explain)."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from approvals.models import ApprovalRule, SecurityGroup
from approvals.pending.decide import trace_rows
from approvals.policy_doc.rule_preview import rule_change_impact, rule_doc
from approvals.rules.admin_impact import (
    CONFIRM_HELP,
    CONFIRM_LABEL,
    SecurityGroupForm,
    impact_answer,
    impact_state,
    impact_text,
    loosening_sentence,
)
from approvals.rules.explain import PRECEDENCE, TestCallForm, never_wins
from approvals.rules.policy import fired_provenance
from approvals.rules.seed import DEFAULT_PRIORITY
from approvals.rules.selectors import tools_catalog
from approvals.rules.services import (
    approval_rule_delete,
    approval_rule_problems,
    approval_rule_save,
    security_group_delete,
    security_group_save,
)
from audit.actors import Actor

TOOL_DATALIST_ID = "skald-tool-catalog"


# --- rules -------------------------------------------------------------------------------------

class ToolPicker(forms.TextInput):
    """A free-text tool pattern with suggestions: the page renders one ``<datalist>`` of every
    known tool (``tool_catalog`` in the context, see ``approvals/includes/tool_datalist.html``).

    One list per page rather than per input: inline rows added in the browser copy the empty form,
    and ``list`` must keep pointing at an id that exists.
    """

    def __init__(self, attrs: dict[str, Any] | None = None) -> None:
        super().__init__({"list": TOOL_DATALIST_ID, "autocomplete": "off", "placeholder": "tool name or glob",
                          **(attrs or {})})


def tool_choices() -> list[dict[str, Any]]:
    """The datalist's options: the catch-all first, then every tool ``tools_catalog`` knows."""
    return [{"name": "*", "category": "catch-all", "description": "every tool"}, *tools_catalog()]


class ApprovalRuleForm(forms.ModelForm):
    class Meta:
        model = ApprovalRule
        fields = ["group", "tool_pattern", "arg_matchers", "action", "priority", "approval_ttl", "enabled", "note"]
        widgets = {"tool_pattern": ToolPicker(), "arg_matchers": forms.Textarea(attrs={"rows": 2, "cols": 32})}
        help_texts = {
            "tool_pattern": "A tool name or a glob ('read_*', '*'); suggestions list every known tool.",
            "arg_matchers": 'A JSON object of argument path → glob, e.g. {"path": "reports/*"}. Empty: any arguments.',
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            # The seeded rules sit at 100 (the catch-all at 999999): a new rule starts beside them.
            self.fields["priority"].initial = DEFAULT_PRIORITY
        self.fields["priority"].help_text = "Lower numbers are tried first within a rule set. " \
            f"Seeded rules use {DEFAULT_PRIORITY}; the catch-all '*' uses 999999."

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or self.cleaned_data
        # Only check fields that parsed: a field with its own error (say, invalid JSON) is reported once.
        problems = approval_rule_problems(
            tool_pattern=cleaned.get("tool_pattern", ""),
            arg_matchers=cleaned.get("arg_matchers", {}) if "arg_matchers" not in self.errors else {},
            priority=cleaned.get("priority", 0) if "priority" not in self.errors else 0,
        )
        for field, errors in problems.items():
            if field not in self.errors:
                for error in errors:
                    self.add_error(field, error)
        return cleaned


class ApprovalRuleChangeForm(ApprovalRuleForm):
    """The rule page's form: before saving, the impact of the edit on the last week's recorded calls
    (issue 32). A change that would have let any of them through with less restriction saves only
    once confirmed."""

    confirm_loosening = forms.BooleanField(required=False, label=CONFIRM_LABEL, help_text=CONFIRM_HELP)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        group = cleaned.get("group")
        self.impact = rule_change_impact(
            rule_id=self.instance.pk, group=group.name if group is not None else None,
            rule=rule_doc(cleaned),
        )
        if self.impact.loosened and not cleaned.get("confirm_loosening"):
            self.add_error(None, loosening_sentence(self.impact) + f" Tick '{CONFIRM_LABEL}' and save again.")
        return cleaned


class ToolCatalogMixin:
    """Puts the tool catalog in the change form's context for the datalist."""

    def render_change_form(self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
                           ) -> HttpResponse:
        context["tool_catalog"] = tool_choices()
        return super().render_change_form(request, context, *args, **kwargs)  # type: ignore[misc]


class ApprovalRuleInline(admin.TabularInline):
    model = ApprovalRule
    form = ApprovalRuleForm
    fields = ["priority", "tool_pattern", "action", "arg_matchers", "approval_ttl", "enabled", "note", "hit_count"]
    readonly_fields = ["hit_count"]
    ordering = ["priority", "id"]
    extra = 0


class GroupForm(SecurityGroupForm):
    """The group page's form, previewing its inline rules through the inline's own rule form."""

    rule_form = ApprovalRuleForm


@admin.register(SecurityGroup)
class SecurityGroupAdmin(ToolCatalogMixin, admin.ModelAdmin):
    list_display = ["name", "description", "user_count", "agent_count", "rule_count"]
    search_fields = ["name"]
    filter_horizontal = ["users", "agents"]
    inlines = [ApprovalRuleInline]
    form = GroupForm
    fields = ["name", "description", "users", "agents", "confirm_loosening"]

    def get_urls(self) -> list[URLPattern]:
        impact = path("impact-preview/", self.admin_site.admin_view(self.impact_view),
                      name="approvals_securitygroup_impact")
        return [impact, *super().get_urls()]

    def impact_view(self, request: HttpRequest) -> JsonResponse:
        """The group page's live preview: what its members and inline rules as edited would have decided
        differently over the recorded calls, before anything is saved. Writes nothing."""
        if request.method != "POST":
            return JsonResponse({"state": "error", "text": "POST the group form to preview it."}, status=405)
        raw_id = request.POST.get("object_id", "")
        if raw_id and not raw_id.isdigit():
            return JsonResponse({"state": "error", "text": "object_id is not a group's id."}, status=400)
        group = get_object_or_404(SecurityGroup, pk=int(raw_id)) if raw_id else None
        allowed = self.has_change_permission(request, group) if group else self.has_add_permission(request)
        if not allowed:
            raise PermissionDenied
        return JsonResponse(impact_answer(self.form(request.POST, instance=group or SecurityGroup())))

    def get_queryset(self, request: HttpRequest) -> QuerySet[SecurityGroup]:
        return super().get_queryset(request).annotate(
            n_users=Count("users", distinct=True), n_agents=Count("agents", distinct=True),
            n_rules=Count("rules", distinct=True),
        )

    @admin.display(description="users", ordering="n_users")
    def user_count(self, obj: Any) -> int:
        return obj.n_users

    @admin.display(description="agents", ordering="n_agents")
    def agent_count(self, obj: Any) -> int:
        return obj.n_agents

    @admin.display(description="rules", ordering="n_rules")
    def rule_count(self, obj: Any) -> int:
        return obj.n_rules

    def save_model(self, request: HttpRequest, obj: SecurityGroup, form: Any, change: bool) -> None:
        changed = [name for name in form.changed_data if name != "confirm_loosening"]
        security_group_save(actor=Actor.user(request.user), group=obj, changed=changed,
                            users=form.cleaned_data.get("users"), agents=form.cleaned_data.get("agents"))
        impact = getattr(form, "impact", None)
        if impact is not None and impact.changed:
            self.message_user(request, "Impact on recorded calls: " + " ".join(impact.words()[:2]),
                              level=messages.WARNING)

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        # No form.save_m2m(): security_group_save already set the members, inside its audit.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        actor = Actor.user(request.user)
        formset.save(commit=False)
        for rule in formset.deleted_objects:
            approval_rule_delete(actor=actor, rule=rule)
        for rule in formset.new_objects:
            approval_rule_save(actor=actor, rule=rule, changed=["created"])
        for rule, changed in formset.changed_objects:
            approval_rule_save(actor=actor, rule=rule, changed=changed)

    def delete_model(self, request: HttpRequest, obj: SecurityGroup) -> None:
        security_group_delete(actor=Actor.user(request.user), group=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[SecurityGroup]) -> None:
        for group in queryset:
            security_group_delete(actor=Actor.user(request.user), group=group)


class RuleScopeFilter(admin.SimpleListFilter):
    title = "scope"
    parameter_name = "scope"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("global", "Global"), ("group", "Security groups")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalRule]) -> QuerySet[ApprovalRule]:
        if self.value() == "global":
            return queryset.filter(group__isnull=True)
        if self.value() == "group":
            return queryset.filter(group__isnull=False)
        return queryset


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(ToolCatalogMixin, admin.ModelAdmin):
    form = ApprovalRuleChangeForm
    list_display = ["priority", "tool_pattern", "action", "scope", "matchers", "enabled", "hit_count",
                    "approval_ttl", "note"]
    list_display_links = ["priority", "tool_pattern"]
    list_filter = [RuleScopeFilter, "action", "enabled", "group"]
    list_select_related = ["group"]
    search_fields = ["tool_pattern", "note"]
    ordering = ["priority", "id"]
    readonly_fields = ["hit_count", "never_wins_warning"]

    @admin.display(description="can it win?")
    def never_wins_warning(self, obj: ApprovalRule) -> str:
        if obj.pk is None:
            return "—"
        warnings = never_wins().get(obj.pk, [])
        return " ".join(warnings) if warnings else "Yes: some call reaches this rule and it decides it."

    def get_urls(self) -> list[URLPattern]:
        test = path("test-a-call/", self.admin_site.admin_view(self.test_call_view),
                    name="approvals_approvalrule_test_call")
        impact = path("impact-preview/", self.admin_site.admin_view(self.impact_view),
                      name="approvals_approvalrule_impact")
        return [test, impact, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        extra = {"precedence": PRECEDENCE, "never_wins": sorted(never_wins().items()), **(extra_context or {})}
        return super().changelist_view(request, extra_context=extra)

    def test_call_view(self, request: HttpRequest) -> HttpResponse:
        """Explain in the admin: what the gate would decide for this call, and why. Writes nothing."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        form = TestCallForm(request.GET if "tool" in request.GET else None)
        decision = form.decide() if form.is_bound and form.is_valid() else None
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "Test a call",
                   "form": form, "decision": decision, "precedence": PRECEDENCE,
                   "trace": trace_rows(decision, rules_open=True) if decision else [],
                   "provenance_fired": fired_provenance(decision) if decision else [],
                   "tool_catalog": tool_choices()}
        return TemplateResponse(request, "admin/approvals/approvalrule/test_call.html", context)

    def impact_view(self, request: HttpRequest) -> JsonResponse:
        """The rule page's live preview: what the form's current values would have decided differently
        over the recorded calls, before anything is saved. Writes nothing."""
        if request.method != "POST":
            return JsonResponse({"state": "error", "text": "POST the rule form to preview it."}, status=405)
        raw_id = request.POST.get("object_id", "")
        if raw_id and not raw_id.isdigit():
            return JsonResponse({"state": "error", "text": "object_id is not a rule's id."}, status=400)
        rule = get_object_or_404(ApprovalRule.objects.select_related("group"), pk=int(raw_id)) if raw_id else None
        allowed = self.has_change_permission(request, rule) if rule else self.has_add_permission(request)
        if not allowed:
            raise PermissionDenied
        return JsonResponse(impact_answer(ApprovalRuleChangeForm(request.POST, instance=rule or ApprovalRule())))

    @admin.display(description="scope", ordering="group__name")
    def scope(self, obj: ApprovalRule) -> str:
        return f"group: {obj.group.name}" if obj.group is not None else "global"

    @admin.display(description="argument matchers")
    def matchers(self, obj: ApprovalRule) -> str:
        return json.dumps(obj.arg_matchers, sort_keys=True) if obj.arg_matchers else "—"

    def save_model(self, request: HttpRequest, obj: ApprovalRule, form: Any, change: bool) -> None:
        changed = [name for name in form.changed_data if name != "confirm_loosening"]
        approval_rule_save(actor=Actor.user(request.user), rule=obj, changed=changed if change else ["created"])
        impact = getattr(form, "impact", None)
        if impact is not None and impact.changed:
            self.message_user(request, "Impact on recorded calls: " + " ".join(impact.words()[:2]),
                              level=messages.WARNING)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
                    ) -> HttpResponse:
        """The confirmation page says what deleting the rule would have decided differently."""
        extra = dict(extra_context or {})
        if request.method == "GET" and object_id.isdigit():
            rule = ApprovalRule.objects.select_related("group").filter(pk=int(object_id)).first()
            if rule is not None:
                impact = rule_change_impact(rule_id=rule.pk, group=rule.group.name if rule.group else None, rule=None)
                extra["rule_impact"], extra["rule_impact_state"] = impact_text(impact), impact_state(impact)
        return super().delete_view(request, object_id, extra_context=extra)

    def delete_model(self, request: HttpRequest, obj: ApprovalRule) -> None:
        approval_rule_delete(actor=Actor.user(request.user), rule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalRule]) -> None:
        for rule in queryset.select_related("group"):
            approval_rule_delete(actor=Actor.user(request.user), rule=rule)


