"""Admin for runs and the GDL launch action on cases (SPEC W2, O3). Actions call services."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from approvals.models import PendingApproval
from loop.models import SessionEvent
from proposals.models import Proposal
from skald.cases import runs as run_services
from skald.core.admin import ReadOnlyAdmin
from skald.core.errors import SkaldError
from skald.core.ids import new_token
from skald.crosscheck import replay_verify_run
from skald.models import Case, Run
from skald.workflow.views import MAX_TICKET_BYTES, parse_ticket

TIMELINE_LIMIT = 300


def _admin_user(request: HttpRequest) -> AbstractBaseUser:
    user = request.user
    assert isinstance(user, AbstractBaseUser), "the admin site admits authenticated staff only"
    return user


class LaunchForm(forms.Form):
    ticket = forms.CharField(widget=forms.Textarea(attrs={"rows": 6, "cols": 80}), max_length=MAX_TICKET_BYTES,
                             help_text="What the troubleshooter should investigate (1-8192 bytes).")


@admin.action(description="Launch GDL run")
def launch_gdl_run(modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Case]) -> Any:
    if queryset.count() != 1:
        modeladmin.message_user(request, "Select exactly one case to launch a run on.", messages.WARNING)
        return None
    case = queryset.get()
    from skald.core.roles import Role, has_role

    if not (has_role(request.user, Role.WORKFLOW) and request.user.has_perm("skald.write_case")):
        modeladmin.message_user(request, "Launching needs the workflow role and the case write permission.",
                                messages.ERROR)
        return None
    form = LaunchForm(request.POST if "confirm" in request.POST else None)
    if form.is_valid():
        try:
            ticket = parse_ticket({"ticket": form.cleaned_data["ticket"]})
            run, _ = run_services.run_launch(user=_admin_user(request), case_id=case.pk, ticket=ticket,
                                             launch_key=new_token())
        except SkaldError as exc:
            modeladmin.message_user(request, f"{exc.code}: {exc.message}", messages.ERROR)
            return None
        modeladmin.message_user(request, f"Launched run #{run.pk}; it runs on a worker.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:skald_run_change", args=[run.pk]))
    return TemplateResponse(request, "admin/skald/launch_gdl.html",
                            {**modeladmin.admin_site.each_context(request), "case": case, "form": form,
                             "title": "Launch a GDL run"})


def _summary(event: SessionEvent) -> str:
    payload = event.payload or {}
    if event.kind in ("user", "assistant"):
        calls = ", ".join(f"{c['name']}({c['arguments'][:120]})" for c in payload.get("tool_calls", []))
        text = payload.get("content", "")
        return (text[:1500] + (f"\n→ calls: {calls}" if calls else "")).strip()
    if event.kind == "tool_result":
        return f"[{payload.get('status')}] {payload.get('name')}: {payload.get('content', '')[:1500]}"
    return json.dumps(payload, ensure_ascii=False)[:600]


def compaction_detail(event: SessionEvent) -> dict[str, Any] | None:
    """What the timeline shows for a compaction, its probe report or a quota stop (SPEC L14)."""
    payload = event.payload or {}
    if event.kind == "compaction":
        return {"type": "compaction", "summary": payload.get("summary", ""), **payload.get("manifest", {})}
    if event.kind == "control:compaction_probe":
        return {"type": "probe", **payload}
    if event.kind == "control:compaction_quota":
        return {"type": "quota", **payload}
    return None


RUN_FIELDS = ("case", "session", "ticket", "launched_by", "status", "outcome", "handoff_question", "closed_by_human",
              "created_at", "finished_at", "receipt_view", "approvals_view", "proposals_view", "timeline")


class RunAdmin(ReadOnlyAdmin):
    list_display = ["id", "case", "status", "outcome", "launched_by", "created_at", "finished_at"]
    list_filter = ["status"]
    search_fields = ["ticket"]
    actions = ["stop_runs"]
    fields = RUN_FIELDS
    readonly_fields = RUN_FIELDS

    def get_urls(self) -> list[Any]:
        extra = [path("<int:run_id>/replay-verify/", self.admin_site.admin_view(self.replay_verify_view),
                      name="skald_run_replay_verify")]
        return extra + super().get_urls()

    @admin.display(description="Receipt")
    def receipt_view(self, run: Run) -> SafeString:
        verify = reverse("admin:skald_run_replay_verify", args=[run.pk])
        receipt = json.dumps(run.receipt, indent=2) if run.receipt else "(none yet)"
        return format_html('<pre>{}</pre><a class="button" href="{}" id="replay-verify">Replay-verify</a>',
                           receipt, verify)

    @admin.display(description="Approvals")
    def approvals_view(self, run: Run) -> SafeString:
        rows = PendingApproval.objects.filter(session_id=run.session_id).select_related("resolved_by")
        items = [format_html('<li><a href="{}">{} {}</a> — {}{}</li>',
                             reverse("admin:approvals_pendingapproval_change", args=[a.pk]), a.tool, a.batch,
                             a.status, f" by {a.resolved_by}" if a.resolved_by else "") for a in rows]
        return mark_safe("<ul>" + "".join(items) + "</ul>") if items else mark_safe("(none)")  # noqa: S308

    @admin.display(description="Proposals")
    def proposals_view(self, run: Run) -> SafeString:
        items = [format_html('<li><a href="{}">{}</a> — {}</li>',
                             reverse("admin:proposals_proposal_change", args=[p.pk]), p.title, p.status)
                 for p in Proposal.objects.filter(run=run)]
        return mark_safe("<ul>" + "".join(items) + "</ul>") if items else mark_safe("(none)")  # noqa: S308

    @admin.display(description="Event timeline")
    def timeline(self, run: Run) -> SafeString:
        events = SessionEvent.objects.filter(session_id=run.session_id).order_by("seq")[:TIMELINE_LIMIT]
        rows = [{"seq": e.seq, "kind": e.kind, "css": e.kind.replace(":", "-"), "summary": _summary(e),
                 "compaction": compaction_detail(e), "at": e.created_at} for e in events]
        return mark_safe(render_to_string("admin/skald/run_timeline.html", {"events": rows}))  # noqa: S308

    @admin.action(description="Stop selected runs")
    def stop_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        for run in queryset:
            run_services.run_stop(user=_admin_user(request), run=run)
        self.message_user(request, f"Stop requested for {queryset.count()} run(s).", messages.SUCCESS)

    def replay_verify_view(self, request: HttpRequest, run_id: int) -> HttpResponse:
        report = replay_verify_run(run_id=run_id)
        level = messages.SUCCESS if report.ok else messages.ERROR
        text = f"Replay-verify: {'ok' if report.ok else 'MISMATCH'} — {report.exchanges} exchanges, " \
               f"{report.events} events" + (f", mismatches: {report.mismatches[:5]}" if report.mismatches else "")
        self.message_user(request, text, level)
        return HttpResponseRedirect(reverse("admin:skald_run_change", args=[run_id]))
