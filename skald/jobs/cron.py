"""Cron jobs (SPEC S4): a ``cron`` job row and its django-q2 schedule, written together.

Each firing runs ``skald.tasks.run_cron_job`` on a worker: one run in its own conversation,
classified and delivered like a task's, except that a cron job has no parent conversation — its
runs are announced in its home conversation: one its creator chose, or (``notify_owner``) the
owner's Notices conversation (:mod:`skald.jobs.notices`).
"""

from __future__ import annotations

from collections.abc import Sequence

from croniter import croniter
from django.db import transaction
from django_q.models import Schedule

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop import tracing
from loop.delegation import child_exec_allowlist
from loop.errors import HarnessError
from skald.core import clock
from skald.core.errors import SkaldError
from skald.jobs.models import JobKind, JobStatus, ScheduledJob
from skald.jobs.notices import owner_notices_session
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.selection import select_model
from skald.models import AgentKind
from skald.tracing.spans import schedule_span

CRON_FUNC = "skald.tasks.run_cron_job"


def cron_expression_check(expression: str) -> str:
    """A 5-field cron expression (a 6th field, seconds, is allowed); anything else refuses.

    Raises:
        SkaldError: ``cron_invalid``.
    """
    value = " ".join(expression.split())
    if not value or len(value) > 120 or not croniter.is_valid(value) or len(value.split()) not in (5, 6):
        raise SkaldError(f"{expression!r} is not a cron expression", code="cron_invalid")
    return value


def cron_job_create(
    *,
    owner_id: int,
    agent: str,
    task: str,
    expression: str,
    tools: Sequence[str] | None = None,
    creator_exec: Sequence[str] | None = None,
    source: str = "web",
    home_session_id: int | None = None,
    notify_owner: bool = False,
    principal: str,
) -> ScheduledJob:
    """Create a cron job and its schedule (first firing at the expression's next time).

    Its grant is recorded once, here: the agent's tools within ``tools`` (a creating frame's) and
    the agent's process ask within ``creator_exec`` (a creating frame's; None: the deployment's).

    Its home is ``home_session_id`` (a conversation of the owner's) or, with ``notify_owner``, the
    owner's Notices conversation; exactly one.

    Raises:
        SkaldError: ``cron_invalid``, ``agent_unknown``, ``agent_not_task``, ``task_invalid``,
            ``cron_home_required`` (no home: its results would reach nobody) or ``cron_home_ambiguous``
            (both a conversation and "notify the owner").
    """
    cron = cron_expression_check(expression)
    if not task.strip() or len(task) > 8192:
        raise SkaldError("task must be 1-8192 characters", code="task_invalid")
    try:
        spec = AgentRowCatalog().get(agent)
    except HarnessError:
        raise SkaldError(f"no enabled agent named {agent!r}", code="agent_unknown") from None
    if spec.kind != AgentKind.TASK:
        raise SkaldError(f"{agent!r} is not a task agent", code="agent_not_task")
    if home_session_id is None and not notify_owner:
        raise SkaldError("a cron job needs a home for its results: a conversation, or notify the owner",
                         code="cron_home_required")
    if home_session_id is not None and notify_owner:
        raise SkaldError("a cron job's results go to a conversation or to its owner, not both",
                         code="cron_home_ambiguous")
    allowed = [name for name in spec.tools if tools is None or name in set(tools)]
    exec_allowlist = child_exec_allowlist(creator_exec, spec.exec_allowlist)
    with tracing.active(schedule_span("create", agent=spec.name, cron=cron)) as span, transaction.atomic():
        if notify_owner:
            home_session_id = owner_notices_session(owner_id=owner_id).pk
        now = clock.now()
        job = ScheduledJob.objects.create(
            kind=JobKind.CRON, status=JobStatus.SCHEDULED, owner_id=owner_id, source=source, agent=spec.name,
            task=task, tools=allowed, cron=cron, home_session_id=home_session_id, notify_owner=notify_owner,
            exec_allowlist=None if exec_allowlist is None else list(exec_allowlist),
            selection=select_model(spec).as_dict(), created_at=now, updated_at=now,
            scope_extras=_trace_link(span),
        )
        span.set({"skald.job.id": job.pk})
        schedule = Schedule.objects.create(name=f"skald.cron_job.{job.pk}", func=CRON_FUNC, args=str(job.pk),
                                           schedule_type=Schedule.CRON, cron=cron, repeats=-1)
        ScheduledJob.objects.filter(pk=job.pk).update(schedule=schedule)
        job.schedule = schedule
        audit_append(actor=Actor.parse(principal), kind=AuditKind.JOB_CREATED, subject_type="job", subject_id=job.pk,
                     payload={"kind": JobKind.CRON, "agent": spec.name, "cron": cron, "tools": allowed,
                              "home": home_session_id, "notify_owner": notify_owner,
                              "schedule": schedule.pk, "next_run": schedule.next_run.isoformat()
                              if schedule.next_run else None})
    return job


def _trace_link(span: tracing.Span) -> dict[str, str]:
    """What a cron job keeps of the span that scheduled it: every run's admission links to it
    (``skald.jobs.runner``), as a task's links to its spawning call. Nothing while tracing is off."""
    traceparent = span.traceparent()
    return {"traceparent": traceparent} if traceparent else {}


def cron_job_update(*, job_id: int, expression: str, task: str, principal: str) -> ScheduledJob:
    """Change a scheduled cron job's expression and task; its schedule follows (next run recomputed).

    Raises:
        SkaldError: ``cron_invalid``, ``task_invalid``, ``job_not_active``.
    """
    cron = cron_expression_check(expression)
    if not task.strip() or len(task) > 8192:
        raise SkaldError("task must be 1-8192 characters", code="task_invalid")
    with transaction.atomic():
        job = ScheduledJob.objects.select_for_update().get(pk=job_id, kind=JobKind.CRON)
        if job.status != JobStatus.SCHEDULED:
            raise SkaldError("the cron job is not scheduled", code="job_not_active", http_status=409)
        with tracing.active(schedule_span("update", agent=job.agent, cron=cron)) as span:
            span.set({"skald.job.id": job.pk})
            changed = [name for name, value in (("cron", cron), ("task", task)) if getattr(job, name) != value]
            job.cron, job.task, job.updated_at = cron, task, clock.now()
            job.scope_extras = {**job.scope_extras, **_trace_link(span)}
            job.save(update_fields=["cron", "task", "updated_at", "scope_extras"])
        schedule = Schedule.objects.filter(pk=job.schedule_id).first()
        if schedule is not None and "cron" in changed:
            schedule.cron = cron
            schedule.next_run = schedule.calculate_next_run()
            schedule.save(update_fields=["cron", "next_run"])
        audit_append(actor=Actor.parse(principal), kind=AuditKind.JOB_STATE_CHANGED, subject_type="job",
                     subject_id=job.pk, payload={"changed": changed, "cron": cron})
    return job
