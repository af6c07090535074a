"""Job reads: what a chat shows in its task strip (SPEC S5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, Q, QuerySet, Sum

from loop.models import Exchange
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


@dataclass(frozen=True, slots=True)
class TreeSpend:
    """Provider tokens a conversation's tree spent: its own exchanges' (sync children included) and
    its async tasks' (and theirs, at any depth)."""

    own: int
    tasks: int
    task_count: int

    @property
    def total(self) -> int:
        return self.own + self.tasks


def _tokens(session_ids: list[int]) -> int:
    totals = Exchange.objects.filter(session_id__in=session_ids).aggregate(i=Sum("input_tokens"),
                                                                           o=Sum("output_tokens"))
    return int(totals["i"] or 0) + int(totals["o"] or 0)


def tree_spend(*, session_id: int) -> TreeSpend:
    """What the tree rooted at a conversation spent (issue 27 §2), one query per level of async
    tasks (bounded by MAX_AGENT_DEPTH in practice)."""
    children: list[int] = []
    level = [session_id]
    while level:
        level = [pk for pk in ScheduledJob.objects.filter(parent_session_id__in=level, kind=JobKind.TASK)
                 .exclude(child_session_id__isnull=True).values_list("child_session_id", flat=True) if pk]
        children.extend(level)
    return TreeSpend(own=_tokens([session_id]), tasks=_tokens(children) if children else 0,
                     task_count=len(children))
