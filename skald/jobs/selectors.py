"""Job reads: what a chat shows in its task strip (SPEC S5)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, Q, QuerySet

from skald.core import clock
from skald.core.errors import NotFound
from skald.jobs.models import JobKind, JobRun, JobStatus, ScheduledJob

FAILURE_WINDOW = timedelta(minutes=30)


def tasks_for(*, user: AbstractBaseUser, source: str) -> QuerySet[ScheduledJob]:
    """The caller's running tasks of ``source`` plus its failures of the last 30 minutes; successes
    are left out on purpose: a finished task's result is already a message in the conversation."""
    since = clock.now() - FAILURE_WINDOW
    return (
        ScheduledJob.objects.filter(owner_id=user.pk, source=source, kind=JobKind.TASK)
        .filter(Q(status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
                | Q(status__in=[JobStatus.FAILED, JobStatus.REFUSED], updated_at__gte=since))
        .prefetch_related(Prefetch("runs", queryset=JobRun.objects.order_by("number")))
        .order_by("-id")
    )


def task_get(*, user: AbstractBaseUser, job_id: int) -> ScheduledJob:
    job = ScheduledJob.objects.filter(owner_id=user.pk, pk=job_id, kind=JobKind.TASK).first()
    if job is None:
        raise NotFound("No such task.", code="task_not_found")
    return job
