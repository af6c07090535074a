"""Running a job on a worker: the child's environment (built the one way every frame's is), one
kernel exchange in the job's own conversation, then the one
classification of how it ended."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction

from loop.admission import InputRefused
from loop.driver import LoopEnv, admit_exchange, drive_exchange
from loop.models import Exchange
from loop.outcomes import AwaitingHuman
from skald.core import clock
from skald.core.ids import new_token
from skald.core.queue import enqueue_on_commit
from skald.jobs.classify import classify, crashed, refused
from skald.jobs.models import JobKind, JobRun, JobStatus, RunEnding, ScheduledJob
from skald.jobs.output import partial_output, run_output
from skald.jobs.services import (
    RUN_TASK,
    job_request_key,
    job_run_finish,
    job_run_start,
    job_sync_for,
    job_sync_from_exchange,
)
from skald.loop_adapters.runtime import build_env

logger = logging.getLogger(__name__)


def job_env(job: ScheduledJob, run: JobRun) -> LoopEnv:
    """The run's environment: its conversation's, built the one way every frame's is
    (:func:`skald.loop_adapters.runtime.build_env`: the owner's scope narrowed by the job's
    recorded grant)."""
    assert run.session is not None
    return build_env(run.session)


def run_job(job_id: int) -> str:
    """Start the job's run, drive its exchange, classify the ending (once) and so deliver it."""
    run = job_run_start(job_id=job_id)
    if run is None:
        return "not started (already started, cancelled or unknown)"
    job = run.job
    exchange: Exchange | None = None
    try:
        env = job_env(job, run)
        # A run's trace is its own, linked to what asked for it (not nested: it outlives it): a task's
        # to the call that spawned it, a cron run's to the request that created or last changed its job.
        parent = str(job.scope_extras.get("traceparent") or "")
        exchange, _ = admit_exchange(env, request_key=job_request_key(job, run.number), content=job.task,
                                     author=f"agent:{job.scope_extras.get('gate_agent') or 'cron'}",
                                     trace_links=(parent,) if parent else ())
        JobRun.objects.filter(pk=run.pk).update(exchange=exchange)  # a link for the admin, not a state change
        if ScheduledJob.objects.filter(pk=job.pk, cancel_requested_at__isnull=False).exists():
            env.store.exchanges.request_cancel(exchange.pk, principal=env.principal)  # cancelled before it was admitted
        result = drive_exchange(env, exchange, claim_token=new_token())
    except InputRefused as exc:  # its own text tripped a rule: refused, and that ending is delivered
        job_run_finish(run_id=run.pk, ending=refused(exc), output="",
                       exchange_id=exchange.pk if exchange is not None else None)
        return RunEnding.REFUSED
    except Exception as exc:
        logger.exception("job %s run %s crashed", job.pk, run.number)
        job_run_finish(run_id=run.pk, ending=crashed(exc), output=partial_output(run.session_id),
                       exchange_id=exchange.pk if exchange is not None else None)
        return RunEnding.FAILED
    if isinstance(result.outcome, AwaitingHuman):
        return "awaiting_human"  # classified when the exchange settles (job_sync_from_exchange)
    job_run_finish(run_id=run.pk, ending=classify(result.outcome), output=run_output(result.outcome, run.session_id),
                   exchange_id=exchange.pk)
    return classify(result.outcome).status


__all__ = ["JobKind", "job_env", "job_sync_for", "job_sync_from_exchange", "partial_output", "run_job"]


LOST_QUEUE_AFTER = timedelta(minutes=5)


def reap_lost() -> int:
    """What a lost worker or a lost queue message left behind, found by the every-minute sweep:
    a task still queued long after it was written is enqueued again (starting is once, so a
    duplicate does nothing), and a run whose worker died before its exchange was admitted ends
    ``failed`` (classified and delivered like any ending). Returns how many were touched."""
    now = clock.now()
    touched = 0
    for job_id in ScheduledJob.objects.filter(kind=JobKind.TASK, status=JobStatus.QUEUED,
                                              created_at__lt=now - LOST_QUEUE_AFTER).values_list("pk", flat=True)[:100]:
        with transaction.atomic():
            enqueue_on_commit(RUN_TASK, job_id)
        touched += 1
    stale = now - timedelta(seconds=settings.SKALD_CLAIM_STALE_SECONDS)
    for run in JobRun.objects.filter(status=RunEnding.RUNNING, exchange__isnull=True, started_at__lt=stale)[:100]:
        job_run_finish(run_id=run.pk, ending=crashed("the worker was lost before the run began"))
        touched += 1
    return touched
