"""Admin for runs and the GDL launch from a case (SPEC W2, O3). Actions call services.

The run page is a read of the run, its session's events and its approvals: a banner that says what
the run waits for (and links to it), a summary, the readable timeline and the receipt as a table.
Its live region (``<run>/live/``) is the same read as a fragment, swapped in by ``live.js`` when
the session websocket reports a committed event.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from approvals.models import ApprovalStatus, PendingApproval
from loop.events import EventKind
from loop.models import SessionEvent
from proposals.models import Proposal
from skald.admin.timeline import receipt_rows, timeline_lines
from skald.cases import runs as run_services
from skald.cases.tickets import MAX_TICKET_BYTES, parse_ticket
from skald.core.admin import ReadOnlyAdmin, admin_may_view
from skald.core.errors import NotFound, SkaldError
from skald.core.ids import new_token
from skald.core.roles import GOVERNANCE_ROLES, Role, RoleRequired, has_role
from skald.crosscheck import replay_verify_run
from skald.jobs.selectors import tree_spend
from skald.models import Case, Run, RunStatus

TIMELINE_LIMIT = 500
# A run's outcome as the end of a sentence on its banner (the status pill beside it names the status).
OUTCOME_SENTENCES = {
    "completed": "answered and the run completed",
    "canceled": "a person stopped it",
    "stop": "a person stopped it",
    "turn_cap_reached": "the agent used all its turns without an answer",
    "budget_exceeded": "the run spent its token budget before an answer",
    "provider_failed": "the model provider failed",
    "closed_by_human": "a person closed it after a handoff",
}
READERS = GOVERNANCE_ROLES


def _admin_user(request: HttpRequest) -> AbstractBaseUser:
    user = request.user
    assert isinstance(user, AbstractBaseUser), "the admin site admits authenticated staff only"
    return user


def may_launch(request: HttpRequest) -> bool:
    return has_role(request.user, Role.WORKFLOW) and request.user.has_perm("skald.write_case")


class LaunchForm(forms.Form):
    ticket = forms.CharField(widget=forms.Textarea(attrs={"rows": 8, "cols": 90}), max_length=MAX_TICKET_BYTES,
                             help_text="What the troubleshooter should investigate (1-8192 bytes). "
                                       "Prefilled from the case; edit it freely.")


def case_ticket(case: Case) -> str:
    return f"{case.title}\n\n{case.description}".strip()


def launch_view(modeladmin: admin.ModelAdmin, request: HttpRequest, case_id: int) -> HttpResponse:
    """``/admin/skald/case/<id>/launch/``: the ticket form (prefilled from the case), then the run page."""
    case = get_object_or_404(Case, pk=case_id)
    if not has_role(request.user, Role.WORKFLOW):
        raise RoleRequired("Launching a run", Role.WORKFLOW)
    if not may_launch(request):
        raise PermissionDenied
    form = LaunchForm(request.POST if request.method == "POST" else None, initial={"ticket": case_ticket(case)})
    if form.is_valid():
        try:
            ticket = parse_ticket({"ticket": form.cleaned_data["ticket"]})
            run, _ = run_services.run_launch(user=_admin_user(request), case_id=case.pk, ticket=ticket,
                                             launch_key=new_token())
        except SkaldError as exc:
            form.add_error("ticket", f"{exc.message} ({exc.code})")
        else:
            modeladmin.message_user(request, f"Launched run #{run.pk}; it runs on a worker.", messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:skald_run_change", args=[run.pk]))
    return TemplateResponse(request, "admin/skald/launch_gdl.html",
                            {**modeladmin.admin_site.each_context(request), "case": case, "form": form,
                             "opts": modeladmin.opts, "title": f"Launch a GDL run on “{case.title}”"})


@admin.action(description="Launch GDL run")
def launch_gdl_run(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Case]) -> Any:
    if queryset.count() != 1:
        modeladmin.message_user(request, "Select exactly one case to launch a run on.", messages.WARNING)
        return None
    return HttpResponseRedirect(reverse("admin:skald_case_launch", args=[queryset.get().pk]))


def banner(run: Run, pending: list[PendingApproval], *, approvals_open: bool) -> dict[str, Any]:
    """What the run waits for, in one sentence, with the link that answers it."""
    links = [(f"{a.tool} ({a.batch})",
              reverse("admin:approvals_pendingapproval_change", args=[a.pk]) if approvals_open else "")
             for a in pending]
    if run.status == RunStatus.AWAITING_HUMAN and links:
        text = "Waiting for an approver to answer " + ("these calls:" if len(links) > 1 else "this call:")
        return {"tone": "", "text": text, "links": links, "status": "Waiting for an approver"}
    if run.status == RunStatus.AWAITING_HUMAN:
        return {"tone": "", "text": "Waiting for a human: the agent asked a question; answer it in the "
                                    "run's session (console).", "links": []}
    if run.status == RunStatus.HANDOFF:
        return {"tone": "", "text": f"Handed to a human: {run.handoff_question or 'the agent is stuck'}. "
                                    "Answer with the handoff decision (workflow API).", "links": []}
    if run.status == RunStatus.QUEUED:
        return {"tone": "live", "text": "Queued: waiting for a worker to pick the run up.", "links": []}
    if run.status == RunStatus.RUNNING:
        return {"tone": "live", "text": "Running: the agent is working; this page follows it.", "links": []}
    outcome = OUTCOME_SENTENCES.get(run.outcome or "", (run.outcome or "").replace("_", " "))
    if run.status == RunStatus.COMPLETED:
        return {"tone": "done", "text": f"The agent {outcome or 'finished'}.", "links": []}
    if run.status == RunStatus.CANCELED:
        return {"tone": "bad", "text": f"Stopped: {outcome or 'a person stopped it'}.", "links": []}
    return {"tone": "bad", "text": f"Failed: {outcome or 'the run ended without an outcome'}.", "links": []}


class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "case", "status_pill", "outcome", "launched_by", "created_at", "finished_at"]
    list_display_links = ["id"]
    list_filter = ["status"]
    list_select_related = ["case", "launched_by"]
    search_fields = ["ticket", "case__title"]
    actions = ["stop_runs"]
    change_form_template = "admin/skald/run/change.html"

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A run is the context of every approval and proposal: each governance role may read it.
        return has_role(request.user, *READERS) or super().has_view_permission(request, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_view_permission(request)

    def has_stop_permission(self, request: HttpRequest) -> bool:
        return may_launch(request)

    @admin.display(description="status", ordering="status")
    def status_pill(self, run: Run) -> str:
        return format_html('<span class="status status-{}">{}</span>', run.status, run.get_status_display())

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        extra = [path("<int:run_id>/replay-verify/", wrap(self.replay_verify_view), name="skald_run_replay_verify"),
                 path("<int:run_id>/live/", wrap(self.live_view), name="skald_run_live")]
        return extra + super().get_urls()

    def run_context(self, request: HttpRequest, run: Run) -> dict[str, Any]:
        """One read for the page and its live fragment."""
        approvals = list(PendingApproval.objects.filter(session_id=run.session_id)
                         .select_related("resolved_by", "tool_call").order_by("tool_call_id"))
        approvals_open = admin_may_view(request, self.admin_site, PendingApproval)
        # Events name a call by its key; the approval page is found through the call's row.
        urls = {approval.tool_call.call_key: reverse("admin:approvals_pendingapproval_change", args=[approval.pk])
                for approval in approvals} if approvals_open else {}
        events = list(SessionEvent.objects.filter(session_id=run.session_id).order_by("seq")[:TIMELINE_LIMIT])
        labels = {str(e.payload.get("by", "")) for e in events if e.kind == EventKind.APPROVAL_RESOLVED}
        ids = [label.split(":", 1)[1] for label in labels if label.startswith("user:") and label[5:].isdigit()]
        names = {f"user:{pk}": name for pk, name in
                 get_user_model().objects.filter(pk__in=ids).values_list("pk", "username")} if ids else {}
        pending = [a for a in approvals if a.status == ApprovalStatus.PENDING]
        proposals = list(Proposal.objects.filter(run=run).order_by("id"))
        compactions = [e.seq for e in events if e.kind == EventKind.COMPACTION]
        return {
            "run": run,
            "banner": banner(run, pending, approvals_open=approvals_open),
            "lines": timeline_lines(events, agent=run.session.agent, user=run.launched_by.get_username(),
                                    approval_urls=urls, names=names),
            "receipt": receipt_rows(run.receipt),
            "approvals": approvals,
            "approvals_open": approvals_open,
            "proposals": proposals,
            "proposals_open": admin_may_view(request, self.admin_site, Proposal),
            "case_open": admin_may_view(request, self.admin_site, Case),
            "last_seq": run.session.last_seq,
            "spend": tree_spend(session_id=run.session_id),
            "compactions": compactions,
            "compactions_url": reverse("admin:loop_sessionevent_changelist")
            + f"?session={run.session_id}&kind={EventKind.COMPACTION.value}"
            if compactions and admin_may_view(request, self.admin_site, SessionEvent) else "",  # all its rows
        }

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "",
                    extra_context: dict[str, Any] | None = None) -> HttpResponse:
        run = get_object_or_404(Run.objects.select_related("case", "session", "launched_by"),
                                pk=object_id if str(object_id).isdigit() else 0)
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        context = {**self.admin_site.each_context(request), "opts": self.opts, "original": run,
                   "title": f"Run #{run.pk} on “{run.case.title}”", "can_stop": self.has_stop_permission(request)
                   and run.status not in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED),
                   **self.run_context(request, run), **(extra_context or {})}
        return TemplateResponse(request, self.change_form_template, context)

    def live_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        run = get_object_or_404(Run.objects.select_related("case", "session", "launched_by"), pk=run_id)
        if not self.has_view_permission(request, run):
            raise PermissionDenied
        return TemplateResponse(request, "admin/skald/run/live.html", self.run_context(request, run))

    @admin.action(description="Stop selected runs", permissions=["stop"])
    def stop_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            run_services.run_stop(user=_admin_user(request), run=run)
        self.message_user(request, f"Stop requested for {queryset.count()} run(s).", messages.SUCCESS)

    def replay_verify_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            report = replay_verify_run(run_id=run_id)
        except NotFound:
            raise Http404(f"Run {run_id} does not exist.") from None
        level = messages.SUCCESS if report.ok else messages.ERROR
        text = f"Replay-verify: {'ok' if report.ok else 'MISMATCH'} — {report.exchanges} exchanges, " \
               f"{report.events} events" + (f", mismatches: {report.mismatches[:5]}" if report.mismatches else "")
        self.message_user(request, text, level)
        return HttpResponseRedirect(reverse("admin:skald_run_change", args=[run_id]))
