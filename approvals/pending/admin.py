"""Parked calls in the admin (SPEC A3, A4, O3): the approver's queue and the decision page.

Resolutions go through ``pending_approval_resolve``, the same service the API calls."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.views.main import ChangeList
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.timesince import timesince

from approvals.models import ApprovalStatus, PendingApproval
from approvals.pending.decide import decision_context, diff_html, key_argument, next_pending, rule_sentence
from approvals.pending.services import pending_approval_resolve
from skald.core.admin import ReadOnlyAdmin, admin_may_view, current_viewer
from skald.core.clock import now
from skald.core.errors import SkaldError
from skald.core.text import clip_to_line
from skald.models import Run

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


@admin.register(PendingApproval)
class PendingApprovalAdmin(ReadOnlyAdmin):  # parked calls change only through the services
    list_display = ["tool", "key_argument_text", "case_title", "run_link", "batch_link", "requester", "status_pill",
                    "waiting", "rule_label", "resolver", "reason_short"]
    RESOLVED_ONLY = ("resolver", "reason_short")
    list_display_links = ["tool"]
    list_filter = [StateFilter, "tool"]
    list_select_related = ["requested_by", "resolved_by", "session__run__case"]
    list_per_page = 50
    search_fields = ["=request_id", "tool", "batch", "requested_by__username"]
    # Oldest first: a queue is worked from its head.
    ordering = ["created_at", "tool_call_id"]
    actions = ["approve_selected", "reject_selected"]
    change_form_template = "admin/approvals/pendingapproval/decide.html"

    def has_resolve_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("approvals.resolve_approval")

    def get_list_display(self, request: HttpRequest) -> Any:
        """The pending inbox drops the columns only a resolved call fills (who resolved, why)."""
        columns = list(super().get_list_display(request))
        if request.GET.get(StateFilter.parameter_name, "pending") == "pending":
            columns = [column for column in columns if column not in self.RESOLVED_ONLY]
        return columns

    # -- columns

    @admin.display(description="what it touches")
    def key_argument_text(self, obj: PendingApproval) -> str:
        text = key_argument(obj.args)
        return format_html('<code class="skald-key-arg">{}</code>', text) if text else "—"

    @admin.display(description="run")
    def run_link(self, obj: PendingApproval) -> str:
        run = getattr(obj.session, "run", None)
        if run is None:
            return "—"
        viewer = current_viewer()
        if viewer is None or not admin_may_view(viewer, self.admin_site, Run):
            return f"run #{run.pk}"
        return format_html('<a href="{}">run #{}</a>', reverse("admin:skald_run_change", args=[run.pk]), run.pk)

    @admin.display(description="case")
    def case_title(self, obj: PendingApproval) -> str:
        run = getattr(obj.session, "run", None)
        return run.case.title if run is not None else f"console session #{obj.session_id}"

    @admin.display(description="batch", ordering="batch")
    def batch_link(self, obj: PendingApproval) -> str:
        query = f"?session={obj.session_id}&batch={obj.batch}&state=all"
        return format_html('<a href="{}">{}</a>', query, f"s{obj.session_id} · {obj.batch}")

    @admin.display(description="requested by", ordering="requested_by__username")
    def requester(self, obj: PendingApproval) -> str:
        return obj.requested_by.get_username() if obj.requested_by else "—"

    @admin.display(description="resolved by", ordering="resolved_by__username")
    def resolver(self, obj: PendingApproval) -> str:
        return obj.resolved_by.get_username() if obj.resolved_by else "—"

    @admin.display(description="status", ordering="status")
    def status_pill(self, obj: PendingApproval) -> str:
        return format_html('<span class="status status-{}">{}</span>', obj.status, obj.get_status_display())

    @admin.display(description="waiting", ordering="created_at")
    def waiting(self, obj: PendingApproval) -> str:
        end = obj.resolved_at or now()
        return timesince(obj.created_at, end).split(",")[0]

    @admin.display(description="reason")
    def reason_short(self, obj: PendingApproval) -> str:
        return clip_to_line(obj.reason, 80)

    @admin.display(description="rule")
    def rule_label(self, obj: PendingApproval) -> str:
        return rule_sentence(obj.rule_snapshot or {})

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        return lookup in {"session", "batch"} or super().lookup_allowed(lookup, value, request)

    # -- the decision page: context, why, the diff, a sticky decide bar

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        approval = get_object_or_404(PendingApproval.objects.select_related(
            "requested_by", "resolved_by", "session", "tool_call", "rule"), pk=object_id if object_id.isdigit() else 0)
        if not self.has_view_permission(request, approval):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "original": approval,
            "title": f"{approval.tool}: approve or reject",
            **decision_context(request, self.admin_site, approval),
            "can_resolve": approval.status == ApprovalStatus.PENDING and self.has_resolve_permission(request),
            "resolve_form": ResolveForm(decision="approve"),
            "next_pending": next_pending(after=approval),
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.change_form_template, context)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        own = [path("<int:pk>/resolve/", wrap(self.resolve_view), name=f"{prefix}_resolve")]
        return own + super().get_urls()

    def resolve_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_resolve_permission(request):
            raise PermissionDenied
        approval = get_object_or_404(PendingApproval, pk=pk)
        decision = "reject" if "_reject" in request.POST else "approve"
        form = ResolveForm(request.POST, decision=decision)
        if not form.is_valid():
            for error in form.errors.get("reason", []):
                self.message_user(request, f"{approval.tool}: {error}", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:approvals_pendingapproval_change", args=[approval.pk]))
        if not self._resolve(request, [approval], decision=decision, reason=form.cleaned_data["reason"],
                             announce=False,  # the decide page's checkbox (docs/provenance.md)
                             provenance_acknowledged=request.POST.get("provenance_acknowledged") == "on"):
            return HttpResponseRedirect(reverse("admin:approvals_pendingapproval_change", args=[approval.pk]))
        following = next_pending(after=approval)
        decided = f"{'Approved' if decision == 'approve' else 'Rejected'} {self._call_words(approval)}"
        if following is None:
            self.message_user(request, f"{decided}. Nothing else is waiting: the queue below is empty.",
                              messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:approvals_pendingapproval_changelist"))
        self.message_user(request, f"{decided}. Now showing the next call waiting: "
                                   f"{self._call_words(following)}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:approvals_pendingapproval_change", args=[following.pk]))

    @staticmethod
    def _call_words(approval: PendingApproval) -> str:
        """``write_file (notes/plan.md) for "Disk full on web-1"``: the call as a person names it."""
        key = key_argument(approval.args)
        run = getattr(approval.session, "run", None)
        where = f' for "{run.case.title}"' if run is not None else f" in console session #{approval.session_id}"
        return f"{approval.tool}{f' ({key})' if key else ''}{where}"

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

    def _resolve(self, request: HttpRequest, approvals: list[PendingApproval], *, decision: str, reason: str,
                 announce: bool = True, provenance_acknowledged: bool = False) -> int:
        resolver = cast(AbstractBaseUser, request.user)  # admin_view: an authenticated staff user
        done = 0
        for approval in approvals:
            try:
                pending_approval_resolve(resolver=resolver, decision=decision, reason=reason,
                                         request_id=approval.request_id,
                                         provenance_acknowledged=provenance_acknowledged)
            except SkaldError as exc:
                self.message_user(
                    request, f"{approval.tool} ({approval.batch}, {approval.request_id}): {exc.message} [{exc.code}]",
                    messages.ERROR,
                )
            else:
                done += 1
        if done and announce:
            verb = "Approved" if decision == "approve" else "Rejected"
            self.message_user(request, f"{verb} {done} call{'s' if done != 1 else ''}; their runs continue. "
                                       "The list below shows the calls still waiting.", messages.SUCCESS)
        return done


