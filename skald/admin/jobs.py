"""Jobs in the admin (SPEC S4, O3): async tasks and cron jobs with their runs; operators create and
edit cron jobs here (next run, last runs, outcome). Writes go through :mod:`skald.jobs` services."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from loop.models import Session
from skald.core.admin import ReadOnlyAdmin, ReadOnlyMixin
from skald.core.errors import SkaldError
from skald.jobs.cron import cron_expression_check, cron_job_create, cron_job_update
from skald.jobs.models import JobKind, JobRun, ScheduledJob
from skald.jobs.services import job_cancel, job_run_delivery_retry
from skald.models import Agent, AgentKind


class CronJobForm(forms.ModelForm):
    agent = forms.ChoiceField(choices=())
    cron = forms.CharField(max_length=120, help_text="min hour day month weekday (an optional 6th field: seconds)")
    home_session = forms.ModelChoiceField(
        queryset=Session.objects.none(), label="Home conversation", required=False,
        help_text="Where each run's result is posted: one of your conversations (issue 27 §7) …")
    notify_owner = forms.BooleanField(
        label="… or notify the owner", required=False,
        help_text="Post each run's result to the owner's Notices conversation instead (made on first use).")

    class Meta:
        model = ScheduledJob
        fields = ["agent", "task", "cron", "source", "home_session", "notify_owner"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields.pop("agent", None)  # a job's agent is fixed once it exists
        names = Agent.objects.filter(kind=AgentKind.TASK, enabled=True).values_list("name", flat=True)
        field = self.fields.get("agent")
        if isinstance(field, forms.ChoiceField):
            field.choices = [(name, name) for name in names]

    def clean(self) -> dict[str, Any] | None:
        data = super().clean()
        if self.instance.pk is None and data is not None:  # a new job's home: exactly one of the two
            home, notify = data.get("home_session"), data.get("notify_owner")
            if home is None and not notify:  # its runs' results would reach nobody
                raise forms.ValidationError("A cron job needs a home for its results: pick a conversation "
                                            "or notify the owner.", code="cron_home_required")
            if home is not None and notify:
                raise forms.ValidationError("Pick a home conversation or notify the owner, not both.",
                                            code="cron_home_ambiguous")
        return data

    def clean_cron(self) -> str:
        try:
            return cron_expression_check(self.cleaned_data["cron"])
        except SkaldError as exc:
            raise forms.ValidationError(exc.message, code=exc.code) from None


class JobRunInline(ReadOnlyMixin, admin.TabularInline):
    model = JobRun
    fields = ("number", "status", "outcome", "error", "started_at", "ended_at", "delivered_at", "delivery_attempts",
              "delivery_error", "dead_lettered_at", "returned_tokens", "session")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-number"]  # runs are written by workers only


@admin.register(ScheduledJob)
class ScheduledJobAdmin(admin.ModelAdmin):
    list_display = ["id", "kind", "status", "agent", "cron", "next_run", "last_run", "owner", "created_at"]
    list_filter = ["kind", "status"]
    search_fields = ["task", "agent"]
    inlines = [JobRunInline]
    actions = ["cancel_jobs"]
    readonly_fields = ("kind", "status", "owner", "parent_session", "parent_call", "child_session", "home_session",
                       "notify_owner",
                       "tools", "selection", "next_run", "created_at", "updated_at")

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None or obj.kind == JobKind.CRON:
            kwargs["form"] = CronJobForm
        form = super().get_form(request, obj, change, **kwargs)
        home = form.base_fields.get("home_session")
        if isinstance(home, forms.ModelChoiceField):  # a home is one of the creator's own conversations
            home.queryset = Session.objects.filter(owner_id=request.user.pk).exclude(source__in=["task", "cron"])
        return form

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["agent", "task", "cron", "source", "home_session", "notify_owner"]
        if obj.kind == JobKind.CRON:
            return ["agent", "task", "cron", "source", *self.readonly_fields]
        return ["agent", "task", *self.readonly_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is not None and obj.kind == JobKind.TASK:
            return ["agent", "task", *self.readonly_fields]  # a task is what its parent asked: not editable
        if obj is not None:
            return ["agent", "source", *self.readonly_fields]
        return []

    def save_model(self, request: HttpRequest, obj: ScheduledJob, form: Any, change: bool) -> None:
        principal = f"user:{request.user.pk}"
        data = form.cleaned_data
        try:
            if change:
                cron_job_update(job_id=obj.pk, expression=data["cron"], task=data["task"], principal=principal)
            else:
                home = data.get("home_session")
                created = cron_job_create(owner_id=int(request.user.pk or 0), agent=data["agent"], task=data["task"],
                                          expression=data["cron"], source=data.get("source") or "web",
                                          home_session_id=home.pk if home is not None else None,
                                          notify_owner=bool(data.get("notify_owner")), principal=principal)
                obj.pk = created.pk
        except SkaldError as exc:  # e.g. the agent was disabled meanwhile: nothing was stored
            self.message_user(request, f"{exc.code}: {exc.message}", messages.ERROR)

    @admin.display(description="Next run")
    def next_run(self, job: ScheduledJob) -> Any:
        return job.schedule.next_run if job.schedule is not None else "—"

    @admin.display(description="Last run")
    def last_run(self, job: ScheduledJob) -> SafeString | str:
        run = job.runs.order_by("-number").first()
        if run is None:
            return "—"
        return format_html("#{} {}{}", run.number, run.status, " (delivered)" if run.delivered_at else "")

    @admin.action(description="Cancel selected jobs")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[ScheduledJob]) -> None:
        done = _each(self, request, queryset, "job",
                     lambda job: job_cancel(job_id=job.pk, principal=f"user:{request.user.pk}"))
        self.message_user(request, f"Cancelled {done} job(s).", messages.SUCCESS)


class DeadLetterFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "delivery"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("dead", "dead letters"), ("pending", "not delivered yet"), ("delivered", "delivered")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> QuerySet[JobRun]:
        match self.value():
            case "dead":
                return queryset.filter(dead_lettered_at__isnull=False)
            case "pending":
                return queryset.filter(delivered_at__isnull=True, dead_lettered_at__isnull=True)
            case "delivered":
                return queryset.filter(delivered_at__isnull=False)
        return queryset


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    """Job runs with their delivery: a dead letter shows its error and can be retried (issue 27 §4)."""

    list_display = ["id", "job", "number", "status", "outcome", "started_at", "ended_at", "delivered_at",
                    "delivery_attempts", "delivery_error", "dead_lettered_at"]
    list_filter = [DeadLetterFilter, "status", "job__kind"]
    list_select_related = ["job"]
    actions = ["retry_delivery"]

    @admin.action(description="Retry the delivery of selected dead letters")
    def retry_delivery(self, request: HttpRequest, queryset: QuerySet[JobRun]) -> None:
        done = _each(self, request, queryset, "run",
                     lambda run: job_run_delivery_retry(run_id=run.pk, principal=f"user:{request.user.pk}"))
        self.message_user(request, f"Retried {done} delivery(ies).", messages.SUCCESS)


def _each(model_admin: admin.ModelAdmin[Any], request: HttpRequest, items: QuerySet[Any], noun: str,
          act: Callable[[Any], object]) -> int:
    """Run an admin action's service on each selected row; a refusal is a warning naming the row,
    never the end of the batch. Returns how many went through."""
    done = 0
    for item in items:
        try:
            act(item)
            done += 1
        except SkaldError as exc:
            model_admin.message_user(request, f"{noun} #{item.pk}: {exc.message}", messages.WARNING)
    return done
