"""Job reads: what a chat shows in its task strip (SPEC S5)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Prefetch, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

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
    job = (ScheduledJob.objects.filter(owner_id=user.pk, pk=job_id, kind=JobKind.TASK)
           .prefetch_related(Prefetch("runs", queryset=JobRun.objects.order_by("number"))).first())
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


def tree_spends() -> list[int]:
    """Every tree's spend (issue 27 §2, for ``/metrics``): each root conversation's tokens with its
    async tasks' at any depth folded in. A task's conversation belongs to its parent's tree; a cron
    firing's conversation is a root (it spends from its job's own budget). Two queries."""
    per_session = {int(row["session_id"]): int(row["spent"]) for row in Exchange.objects.values("session_id")
                   .annotate(spent=Coalesce(Sum("input_tokens"), 0) + Coalesce(Sum("output_tokens"), 0))}
    parent_of = dict(ScheduledJob.objects.filter(kind=JobKind.TASK, child_session_id__isnull=False)
                     .values_list("child_session_id", "parent_session_id"))
    trees: dict[int, int] = {}
    for session_id, spent in per_session.items():
        root, seen = session_id, {session_id}
        while root in parent_of and parent_of[root] not in seen:  # a cycle cannot be stored; guarded anyway
            root = parent_of[root]
            seen.add(root)
        trees[root] = trees.get(root, 0) + spent
    return sorted(trees.values())
