"""Approvals in the admin (SPEC A2, O3): security groups with their rules, global rules, parked
calls and known tools.

Every write goes through a service: rules and groups through :mod:`approvals.policy_services`
(audited RULE_CHANGED / GROUP_CHANGED), resolutions through ``pending_approval_resolve`` — the
same service the API calls. Parked calls and known tools are never edited here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from approvals import selectors_pending
from approvals.models import ApprovalRule, ApprovalStatus, KnownTool, PendingApproval, SecurityGroup
from approvals.policy_services import (
    approval_rule_delete,
    approval_rule_problems,
    approval_rule_save,
    security_group_delete,
    security_group_save,
)
from approvals.selectors import tools_catalog
from approvals.services import pending_approval_resolve
from audit.actors import Actor
from skald.core.admin import ReadOnlyAdmin
from skald.core.errors import SkaldError

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


@admin.register(SecurityGroup)
class SecurityGroupAdmin(ToolCatalogMixin, admin.ModelAdmin):
    list_display = ["name", "description", "user_count", "agent_count", "rule_count"]
    search_fields = ["name"]
    filter_horizontal = ["users", "agents"]
    inlines = [ApprovalRuleInline]
    fields = ["name", "description", "users", "agents"]

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
        security_group_save(actor=Actor.user(request.user), group=obj, changed=form.changed_data,
                            users=form.cleaned_data.get("users"), agents=form.cleaned_data.get("agents"))

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
    form = ApprovalRuleForm
    list_display = ["priority", "tool_pattern", "action", "scope", "matchers", "enabled", "hit_count",
                    "approval_ttl", "note"]
    list_display_links = ["priority", "tool_pattern"]
    list_filter = [RuleScopeFilter, "action", "enabled", "group"]
    list_select_related = ["group"]
    search_fields = ["tool_pattern", "note"]
    ordering = ["priority", "id"]
    readonly_fields = ["hit_count"]

    @admin.display(description="scope", ordering="group__name")
    def scope(self, obj: ApprovalRule) -> str:
        return f"group: {obj.group.name}" if obj.group is not None else "global"

    @admin.display(description="argument matchers")
    def matchers(self, obj: ApprovalRule) -> str:
        return json.dumps(obj.arg_matchers, sort_keys=True) if obj.arg_matchers else "—"

    def save_model(self, request: HttpRequest, obj: ApprovalRule, form: Any, change: bool) -> None:
        approval_rule_save(actor=Actor.user(request.user), rule=obj,
                           changed=form.changed_data if change else ["created"])

    def delete_model(self, request: HttpRequest, obj: ApprovalRule) -> None:
        approval_rule_delete(actor=Actor.user(request.user), rule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApprovalRule]) -> None:
        for rule in queryset.select_related("group"):
            approval_rule_delete(actor=Actor.user(request.user), rule=rule)


# --- parked calls ------------------------------------------------------------------------------

RESOLVED = [ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED]


class StateFilter(admin.SimpleListFilter):
    """Pending by default: the page is the approver's inbox; history is one click away."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("pending", "Pending"), ("resolved", "Resolved"), ("all", "All")]

    def value(self) -> str:
        return super().value() or "pending"

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        for lookup, title in self.lookup_choices:
            yield {"selected": self.value() == lookup, "display": title,
                   "query_string": changelist.get_query_string({self.parameter_name: lookup})}

    def queryset(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> QuerySet[PendingApproval]:
        if self.value() == "pending":
            return queryset.filter(status=ApprovalStatus.PENDING)
        if self.value() == "resolved":
            return queryset.filter(status__in=RESOLVED)
        return queryset


class ResolveForm(forms.Form):
    reason = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))

    def __init__(self, *args: Any, decision: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decision = decision
        self.fields["reason"].required = decision == "reject"
        self.fields["reason"].error_messages["required"] = "A reason is required to reject."


def diff_html(preview: str) -> str:
    """A unified diff in a ``<pre>``, added lines green and removed lines red (escaped)."""
    if not preview:
        return format_html('<p class="help">{}</p>', "No preview for this call.")

    def css(line: str) -> str:
        if line.startswith(("+++", "---")):
            return "diff-file"
        if line.startswith("@@"):
            return "diff-hunk"
        return {"+": "diff-add", "-": "diff-del"}.get(line[:1], "diff-ctx")

    lines = format_html_join("\n", '<span class="{}">{}</span>', ((css(line), line) for line in preview.splitlines()))
    return format_html('<pre class="skald-diff">{}</pre>', lines)


@admin.register(PendingApproval)
class PendingApprovalAdmin(ReadOnlyAdmin):  # parked calls change only through the services
    list_display = ["tool", "batch_link", "session_link", "requested_by", "status", "expires_at", "rule_label",
                    "resolved_by", "resolved_at", "reason_short"]
    list_display_links = ["tool"]
    list_filter = [StateFilter, "tool"]
    list_select_related = ["requested_by", "resolved_by"]
    search_fields = ["=request_id", "tool", "batch"]
    # The batch's calls together, newest exchange first, each batch in call order.
    ordering = ["-tool_call__exchange_id", "-tool_call__turn", "tool_call_id"]
    actions = ["approve_selected", "reject_selected"]
    fieldsets = [
        ("Call", {"fields": ["tool", "batch", "session", "tool_call", "requested_by", "created_at", "expires_at",
                             "status"]}),
        ("Preview", {"fields": ["preview_diff"]}),
        ("Arguments", {"fields": ["arguments", "args_hash"]}),
        ("Rule", {"fields": ["rule", "rule_snapshot_pretty"]}),
        ("Resolution", {"fields": ["resolved_by", "resolved_at", "reason"]}),
    ]
    readonly_fields = ["tool", "batch", "session", "tool_call", "requested_by", "created_at", "expires_at", "status",
                       "preview_diff", "arguments", "args_hash", "rule", "rule_snapshot_pretty", "resolved_by",
                       "resolved_at", "reason"]

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("approvals.resolve_approval")

    # -- columns and fields

    @admin.display(description="batch", ordering="batch")
    def batch_link(self, obj: PendingApproval) -> str:
        query = f"?session={obj.session_id}&batch={obj.batch}&state=all"
        return format_html('<a href="{}">{}</a>', query, f"s{obj.session_id} · {obj.batch}")

    @admin.display(description="session", ordering="session_id")
    def session_link(self, obj: PendingApproval) -> str:
        return format_html('<a href="{}">#{}</a>', reverse("admin:loop_session_change", args=[obj.session_id]),
                           obj.session_id)

    @admin.display(description="reason")
    def reason_short(self, obj: PendingApproval) -> str:
        return obj.reason if len(obj.reason) <= 80 else obj.reason[:79] + "…"

    @admin.display(description="rule")
    def rule_label(self, obj: PendingApproval) -> str:
        snap = obj.rule_snapshot or {}
        if not snap:
            return "—"
        scope = f"group {snap['group']}" if snap.get("group") else "global"
        return f"#{snap.get('id')} {snap.get('action')} {snap.get('tool_pattern')!r} @{snap.get('priority')} ({scope})"

    @admin.display(description="diff preview")
    def preview_diff(self, obj: PendingApproval) -> str:
        return diff_html(obj.preview)

    @admin.display(description="arguments")
    def arguments(self, obj: PendingApproval) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.args, indent=2, sort_keys=True, ensure_ascii=False))

    @admin.display(description="rule snapshot (at parking time)")
    def rule_snapshot_pretty(self, obj: PendingApproval) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.rule_snapshot, indent=2, sort_keys=True))

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        return lookup in {"session", "batch"} or super().lookup_allowed(lookup, value, request)

    # -- change view: the diff, the batch and an answer form

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        approval = self.get_object(request, object_id)
        extra: dict[str, Any] = dict(extra_context or {})
        if approval is not None:
            extra["batch_members"] = list(
                selectors_pending.batch_members(session_id=approval.session_id, batch=approval.batch)
                .select_related("resolved_by")
            )
            extra["can_resolve"] = approval.status == ApprovalStatus.PENDING and self.has_resolve_permission(request)
            extra["resolve_form"] = ResolveForm(decision="approve")
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        own = [path("<int:pk>/resolve/", self.admin_site.admin_view(self.resolve_view), name=f"{prefix}_resolve")]
        return own + super().get_urls()

    def resolve_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_resolve_permission(request):
            raise PermissionDenied
        approval = get_object_or_404(PendingApproval, pk=pk)
        decision = "reject" if "_reject" in request.POST else "approve"
        form = ResolveForm(request.POST, decision=decision)
        if form.is_valid():
            self._resolve(request, [approval], decision=decision, reason=form.cleaned_data["reason"])
        else:
            for error in form.errors.get("reason", []):
                self.message_user(request, f"{approval.tool}: {error}", messages.ERROR)
        return HttpResponseRedirect(reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                                            args=[approval.pk]))

    # -- actions: an intermediate page asks for the reason, then each approval goes to the service

    @admin.action(description="Approve selected calls…", permissions=["resolve"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> HttpResponse | None:
        return self._resolve_action(request, queryset, decision="approve")

    @admin.action(description="Reject selected calls…", permissions=["resolve"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[PendingApproval]) -> HttpResponse | None:
        return self._resolve_action(request, queryset, decision="reject")

    def _resolve_action(self, request: HttpRequest, queryset: QuerySet[PendingApproval], *, decision: str
                        ) -> HttpResponse | None:
        # The changelist shows pending calls by default, so a call someone else answered meanwhile
        # drops out of ``queryset``; look the ticked ids up directly and let the service say so.
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if selected and request.POST.get("select_across") not in ("1", "True", "true"):
            queryset = PendingApproval.objects.filter(pk__in=selected)
        approvals = list(queryset.order_by("tool_call_id"))
        form = ResolveForm(request.POST if request.POST.get("post") else None, decision=decision)
        if form.is_bound and form.is_valid():
            self._resolve(request, approvals, decision=decision, reason=form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{decision.capitalize()} {len(approvals)} parked call(s)",
            "decision": decision,
            "action": request.POST.get("action", f"{decision}_selected"),
            "items": [(approval, diff_html(approval.preview) if approval.preview else "") for approval in approvals],
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "select_across": request.POST.get("select_across", "0"),
        }
        return TemplateResponse(request, "admin/approvals/pendingapproval/resolve_confirmation.html", context)

    def _resolve(self, request: HttpRequest, approvals: list[PendingApproval], *, decision: str, reason: str) -> None:
        resolver = cast(AbstractBaseUser, request.user)  # admin_view: an authenticated staff user
        done = 0
        for approval in approvals:
            try:
                pending_approval_resolve(resolver=resolver, decision=decision, reason=reason,
                                         request_id=approval.request_id)
            except SkaldError as exc:
                self.message_user(
                    request, f"{approval.tool} ({approval.batch}, {approval.request_id}): {exc.message} [{exc.code}]",
                    messages.ERROR,
                )
            else:
                done += 1
        if done:
            verb = "Approved" if decision == "approve" else "Rejected"
            self.message_user(request, f"{verb} {done} call(s); their runs continue.", messages.SUCCESS)


# --- known tools -------------------------------------------------------------------------------

@admin.register(KnownTool)
class KnownToolAdmin(ReadOnlyAdmin):
    list_display = ["name", "category", "first_seen", "last_seen", "description"]
    list_filter = ["category"]
    search_fields = ["name", "description"]


# Credential tripwires live in their own module; importing it registers them with this site.
from approvals import admin_tripwires  # noqa: E402, F401
