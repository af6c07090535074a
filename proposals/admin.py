"""The review queue and accepted knowledge in the admin (SPEC O3, Q2).

Everything here is read-only: a proposal changes only through ``proposal_accept`` /
``proposal_reject`` (reached by the two actions and their intermediate pages), and knowledge only
through an acceptance. The evidence is rendered beside the claim so a decision is made on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from proposals import selectors, services
from proposals.models import KnowledgeEntry, KnowledgeRevision, Proposal, ProposalStatus
from skald.core.admin import ReadOnlyMixin
from skald.core.errors import SkaldError
from skald.core.roles import Role, has_role


def _may_read(request: HttpRequest) -> bool:
    return has_role(request.user, Role.REVIEWER, Role.AUDITOR)


class _ReadOnly(ReadOnlyMixin):
    """Writes go through the services; reviewers and auditors read."""

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return _may_read(request) or super().has_view_permission(request, obj)  # type: ignore[misc]


class AcceptForm(forms.Form):
    """Shown when one proposal is accepted: the reviewer may edit what becomes knowledge."""

    title = forms.CharField(max_length=200)
    body = forms.CharField(widget=forms.Textarea(attrs={"rows": 12, "cols": 100}), max_length=services.BODY_MAX)

    def clean_body(self) -> str:
        return self.cleaned_data["body"].replace("\r\n", "\n")  # browsers post CRLF from a textarea


class RejectForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 4, "cols": 100}), max_length=services.REASON_MAX,
                             help_text="Required: tell the proposer (and later readers) why.")


def render_evidence(proposal: Proposal) -> SafeString:
    return render_to_string("admin/proposals/evidence.html", {"evidence": proposal.evidence or {}})


@admin.register(Proposal)
class ProposalAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ["id", "title", "status", "case", "run", "created_at", "disposer"]
    list_filter = ["status"]
    list_select_related = ["run__case", "disposed_by"]
    search_fields = ["title", "body"]
    ordering = ["id"]
    actions = ["accept_selected", "reject_selected"]
    fields = readonly_fields = (
        "title", "body", "status", "consequence", "evidence_view", "run_link", "session_text", "source_key",
        "disposer", "disposed_at", "reason", "knowledge_entry", "created_at", "audit_trail",
    )

    def get_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        # The audit trail is a link only an audit reader may follow: nobody else is shown it.
        fields = super().get_fields(request, obj)
        return fields if request.user.has_perm("audit.view_auditevent") else [f for f in fields if f != "audit_trail"]

    @admin.display(description="run")
    def run_link(self, obj: Proposal) -> str:
        if obj.run_id is None:
            return "—"
        return format_html('<a href="{}">Run #{}</a>', reverse("admin:skald_run_change", args=[obj.run_id]),
                           obj.run_id)

    @admin.display(description="session")
    def session_text(self, obj: Proposal) -> str:
        return f"#{obj.session_id}"

    @admin.display(description="disposed by")
    def disposer(self, obj: Proposal) -> str:
        return obj.disposed_by.get_username() if obj.disposed_by else "—"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _may_read(request) or super().has_module_permission(request)

    def has_dispose_permission(self, request: HttpRequest) -> bool:
        return has_role(request.user, Role.REVIEWER)

    @admin.display(description="case")
    def case(self, obj: Proposal) -> str:
        return obj.run.case.title if obj.run is not None else "—"

    @admin.display(description="evidence")
    def evidence_view(self, obj: Proposal) -> SafeString:
        return render_evidence(obj)

    @admin.display(description="knowledge effect")
    def consequence(self, obj: Proposal) -> str:
        return _describe(selectors.proposal_consequence(proposal=obj))

    @admin.display(description="audit trail")
    def audit_trail(self, obj: Proposal) -> str:
        url = reverse("admin:audit_auditevent_changelist") + f"?subject_type=proposal&subject_id={obj.pk}"
        return format_html('<a href="{}">audit rows of this proposal</a>', url)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        pending = Proposal.objects.filter(pk=object_id if object_id.isdigit() else 0,
                                          status=ProposalStatus.PENDING).exists()
        extra = {"can_dispose": pending and self.has_dispose_permission(request),
                 "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra_context=extra)

    @admin.action(description="Accept selected proposals…", permissions=["dispose"])
    def accept_selected(self, request: HttpRequest, queryset: QuerySet[Proposal]) -> HttpResponse | None:
        proposals = list(queryset.order_by("id"))
        single = proposals[0] if len(proposals) == 1 else None
        if "apply" in request.POST:
            form = AcceptForm(request.POST) if single else None
            if form is None or form.is_valid():
                edits = _edits(single, form.cleaned_data) if single and form else {}
                return self._dispose(request, proposals, "accepted", lambda p: services.proposal_accept(
                    reviewer=request.user, proposal_id=p.pk, **edits))
        else:
            form = AcceptForm(initial={"title": single.title, "body": single.body}) if single else None
        return self._confirm(request, "accept", proposals, form)

    @admin.action(description="Reject selected proposals…", permissions=["dispose"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[Proposal]) -> HttpResponse | None:
        proposals = list(queryset.order_by("id"))
        form = RejectForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            reason = form.cleaned_data["reason"]
            return self._dispose(request, proposals, "rejected", lambda p: services.proposal_reject(
                reviewer=request.user, proposal_id=p.pk, reason=reason))
        return self._confirm(request, "reject", proposals, form)

    def _confirm(self, request: HttpRequest, verb: str, proposals: list[Proposal],
                 form: forms.Form | None) -> TemplateResponse:
        items = [{"proposal": p, "evidence": render_evidence(p),
                  "consequence": _describe(selectors.proposal_consequence(proposal=p))} for p in proposals]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{verb.capitalize()} {len(proposals)} proposal{'s' if len(proposals) != 1 else ''}",
            "verb": verb,
            "action": f"{verb}_selected",
            "items": items,
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/proposals/proposal/dispose.html", context)

    def _dispose(self, request: HttpRequest, proposals: list[Proposal], done: str,
                 dispose: Callable[[Proposal], Proposal]) -> HttpResponse | None:
        """Dispose each; one proposal decided lands on the next one waiting (as approvals do), a
        batch on the list. Either way a message says what was decided and what is shown now."""
        disposed = []
        for proposal in proposals:
            try:
                disposed.append(dispose(proposal))
            except SkaldError as exc:
                self.message_user(request, f"Proposal {proposal.pk}: {exc.message} ({exc.code})", messages.ERROR)
        if not disposed:
            return None
        if len(proposals) > 1:
            count = len(disposed)
            self.message_user(request, f"{count} proposal{'s' if count != 1 else ''} {done}. The list below "
                                       "shows the proposals as they now stand.", messages.SUCCESS)
            return None
        [proposal] = disposed
        outcome = _describe(selectors.proposal_consequence(proposal=proposal))
        said = f"{done.capitalize()} “{proposal.title}”" + (f": {outcome}" if done == "accepted" else "")
        following = (Proposal.objects.filter(status=ProposalStatus.PENDING).exclude(pk=proposal.pk)
                     .order_by("created_at", "id").first())
        if following is None:
            self.message_user(request, f"{said}. Nothing else is waiting: the list below shows every proposal.",
                              messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:proposals_proposal_changelist"))
        self.message_user(request, f"{said}. Now showing the next proposal waiting: “{following.title}”.",
                          messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:proposals_proposal_change", args=[following.pk]))


def _edits(proposal: Proposal, cleaned: dict[str, str]) -> dict[str, str]:
    """Only what the reviewer changed counts as an edit (the audit row records which fields)."""
    return {name: cleaned[name] for name in ("title", "body")
            if cleaned[name].strip() != getattr(proposal, name).strip()}


def _describe(consequence: dict[str, Any]) -> str:
    action, slug, version = consequence["action"], consequence["slug"], consequence["version"]
    if action == "create":
        return f"create the knowledge entry “{slug}” (v1)"
    if action == "update":
        return f"update the knowledge entry “{slug}” to v{version}"
    if action == "applied":
        return f"accepted as “{slug}” v{version}"
    return "nothing (rejected)"


class KnowledgeRevisionInline(_ReadOnly, admin.TabularInline):
    model = KnowledgeRevision
    fk_name = "entry"
    extra = 0
    fields = readonly_fields = ("version", "title", "body", "proposal", "author", "created_at")
    ordering = ["-version"]
    can_delete = False

    @admin.display(description="created by")
    def author(self, obj: KnowledgeRevision) -> str:
        return obj.created_by.get_username() if obj.created_by else "—"

    def get_queryset(self, request: HttpRequest) -> QuerySet[KnowledgeRevision]:
        return super().get_queryset(request).select_related("created_by", "proposal")


@admin.register(KnowledgeEntry)
class KnowledgeEntryAdmin(_ReadOnly, admin.ModelAdmin):
    list_display = ["slug", "title", "version", "updated_at"]
    search_fields = ["slug", "title", "body"]
    fields = readonly_fields = ("slug", "title", "body", "version", "created_at", "updated_at")
    inlines = [KnowledgeRevisionInline]

    def has_module_permission(self, request: HttpRequest) -> bool:
        return _may_read(request) or super().has_module_permission(request)
