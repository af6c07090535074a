"""The one delivery site (SPEC S4): every ended job run, whatever its ending, goes out from here,
keyed by job kind.

* ``task``: the ending is written into the parent conversation as a new exchange admitted under a
  key derived from the job (a redelivery finds it and writes nothing): the notice, a synthetic
  assistant turn with a completed ``task_completed`` call, and its result — the final text on
  success, prose with whatever partial output the run produced on failure, a cancellation note on
  cancellation. A success or a failure resumes the parent (its next model turn is enqueued); a
  cancellation settles the exchange ``canceled`` without a model call (a stop stays sticky).
* ``cron``: no parent conversation; the run is marked delivered and announced in its home
  conversation (the one its creator chose, or the owner's Notices conversation when it notifies
  the owner); one with no home is never marked delivered.

Admission, the synthetic rows, the run's ``delivered_at`` and the audit row commit together, so a
worker killed anywhere before the commit leaves nothing and the retry delivers exactly once. A
parent that is busy (another exchange running or parked) defers the delivery: it is retried when
that exchange ends, and by the sweep.
"""

from __future__ import annotations

import json
import logging

from django.db import transaction

from audit.kinds import AuditKind
from audit.services import audit_append
from loop import provenance
from loop.driver import LoopEnv, admit_exchange
from loop.errors import AdmissionRefused
from loop.failpoints import failpoint
from loop.masking import withhold_credentials
from loop.models import Exchange, ExchangeStatus, ToolCallStatus
from loop.outcomes import Canceled
from loop.providers.base import AssembledTurn, ToolCallRequest
from skald.core import clock
from skald.core.errors import SkaldError
from skald.core.queue import enqueue_on_commit
from skald.jobs.models import JobKind, JobRun, RunEnding, ScheduledJob
from skald.jobs.notices import owner_notices_session
from skald.jobs.services import (
    TASKS_ACTOR,
    announce,
    delivery_request_key,
    job_run_delivery_failed,
    lock_conversation,
)
from skald.loop_adapters.runtime import build_env

logger = logging.getLogger(__name__)

TASK_COMPLETED = "task_completed"


def result_text(job: ScheduledJob, run: JobRun) -> str:
    """What the parent's model reads as the ``task_completed`` result: never overlookable prose."""
    head = f"Async task #{job.pk} ({job.agent}) "
    match run.status:
        case RunEnding.SUCCEEDED:
            return head + f"succeeded.\n\n{run.output}"
        case RunEnding.FAILED:
            partial = run.output.strip() or "(it produced no output)"
            return head + f"FAILED: {run.error}\n\nPartial output:\n{partial}"
        case RunEnding.REFUSED:
            return head + f"was REFUSED before it ran: {run.error}. Do not send that text again."
        case _:
            return head + f"was cancelled ({run.error or 'stop requested'}); it did not finish."


def run_trust(env: LoopEnv, run: JobRun) -> tuple[str, str]:
    """An async run's result is untrusted when untrusted content entered its conversation
    (injection provenance, docs/provenance.md): its delivered ``task_completed`` result says so."""
    if run.session_id is not None and any(provenance.is_untrusted(row)
                                          for row in env.store.calls.provenance_rows(run.session_id)):
        return provenance.UNTRUSTED, "the async task read untrusted content"
    return provenance.TRUSTED, ""


def job_run_deliver(*, run_id: int) -> str:
    """Deliver an ended run; a delivered one is a no-op. Returns what happened."""
    run = JobRun.objects.select_related("job").filter(pk=run_id).first()
    if run is None or run.status == RunEnding.RUNNING:
        return "nothing to deliver"
    try:
        match run.job.kind:
            case JobKind.TASK:
                return _deliver_task(run)
            case JobKind.CRON:
                return _notify_home(run)
        raise ValueError(f"unknown job kind {run.job.kind!r}")
    except Exception as exc:  # counted: the N-th failure parks it as a dead letter, never retried forever
        logger.exception("delivering job run %s failed", run_id)
        error = withhold_credentials(f"{type(exc).__name__}: {exc}", what="delivery error")
        parked = job_run_delivery_failed(run_id=run_id, error=error)
        return "dead letter" if parked is not None and parked.dead_lettered_at is not None else "failed"


def _deliver_task(run: JobRun) -> str:
    job = run.job
    assert job.parent_session is not None
    env = build_env(job.parent_session)
    try:
        with transaction.atomic():
            locked = JobRun.objects.select_for_update().get(pk=run.pk)
            if locked.delivered_at is not None:
                return _ensure_driven(locked)
            # The task's own text is screened like its output: a task refused for a secret in it
            # must not make its delivery refused on every sweep (issue 27 §4).
            task = withhold_credentials(job.task[:300], what="task", detector=env.detector)
            exchange, _ = admit_exchange(
                env, request_key=delivery_request_key(job, run.number), author="system:tasks",
                content=f"[async task #{job.pk} {run.status}] {job.agent}: {task}",
            )
            failpoint("delegation.before_delivery")  # a kill here must leave nothing behind
            frame = env.store.exchanges.root_frame(exchange)
            arguments = json.dumps({"job": job.pk, "run": run.number, "status": run.status})
            turn = AssembledTurn(text="", tool_calls=[ToolCallRequest(id=f"job{job.pk}", name=TASK_COMPLETED,
                                                                      arguments=arguments)],
                                 input_tokens=0, output_tokens=0, finish_reason="tool_calls")
            # Turn 0: the synthetic turn, before the parent's first model turn of this exchange.
            (call, _parsed), = env.store.exchanges.record_message_end(exchange=exchange, frame=frame, turn=0,
                                                                      assembled=turn, principal=env.principal,
                                                                      spent_tokens=0, journal=1)
            trust, reason = run_trust(env, locked)
            env.store.calls.record_result(call, status=ToolCallStatus.COMPLETED, is_error=False, truncated=False,
                                          content=withhold_credentials(result_text(job, locked), what="task output",
                                                                       detector=env.detector),
                                          principal=env.principal, trust=trust, trust_reason=reason)
            locked.delivered_at, locked.delivery_exchange = clock.now(), exchange
            locked.save(update_fields=["delivered_at", "delivery_exchange"])
            audit_append(actor=TASKS_ACTOR, kind=AuditKind.JOB_DELIVERED, subject_type="job", subject_id=job.pk,
                         payload={"run": run.number, "status": run.status, "session": job.parent_session_id,
                                  "exchange": exchange.pk, "call": call.call_key})
            announce(job, locked)
            if run.status == RunEnding.CANCELLED:
                env.store.exchanges.settle(exchange, Canceled("task cancelled"), principal=env.principal)
            else:
                enqueue_on_commit("skald.tasks.run_kernel_turn", exchange.pk)
    except AdmissionRefused:  # busy or awaiting a human: its next settle (or the sweep) delivers
        return "deferred: the parent conversation is busy"
    return "delivered"


def _ensure_driven(run: JobRun) -> str:
    """A delivered run whose resumed exchange never reached a worker (lost between commit and
    enqueue) is enqueued again; the claim keeps it to one driver."""
    exchange = Exchange.objects.filter(pk=run.delivery_exchange_id or 0).first()
    if exchange is not None and exchange.status == ExchangeStatus.OPEN and not exchange.claim_token:
        enqueue_on_commit("skald.tasks.run_kernel_turn", exchange.pk)
        return "delivered; resumed again"
    return "delivered already"


def _notify_home(run: JobRun) -> str:
    with transaction.atomic():
        locked = JobRun.objects.select_for_update().select_related("job").get(pk=run.pk)
        if locked.delivered_at is not None:
            return "delivered already"
        job = locked.job
        if job.home_session_id is None and job.notify_owner:  # its Notices conversation was deleted: anew
            job.home_session = owner_notices_session(owner_id=job.owner_id)
            ScheduledJob.objects.filter(pk=job.pk).update(home_session=job.home_session)
        if job.home_session_id is None:  # reached nobody: never marked delivered (a dead letter)
            raise SkaldError(f"cron job #{locked.job_id} has no home conversation", code="cron_home_missing")
        lock_conversation(locked.job.home_session_id)
        failpoint("delegation.before_delivery")
        locked.delivered_at = clock.now()
        locked.save(update_fields=["delivered_at"])
        audit_append(actor=TASKS_ACTOR, kind=AuditKind.JOB_DELIVERED, subject_type="job", subject_id=locked.job_id,
                     payload={"run": locked.number, "status": locked.status, "home": locked.job.home_session_id})
        announce(locked.job, locked)
    return "notified"


def deliveries_due(*, session_id: int | None = None, limit: int = 100) -> list[int]:
    """Ended runs not delivered yet (all, or those whose parent is ``session_id``), oldest first;
    dead letters wait for an operator."""
    due = JobRun.objects.filter(delivered_at__isnull=True, dead_lettered_at__isnull=True) \
        .exclude(status=RunEnding.RUNNING)
    if session_id is not None:
        due = due.filter(job__parent_session_id=session_id)
    return list(due.order_by("id").values_list("pk", flat=True)[:limit])


def deliver_due(*, session_id: int | None = None) -> list[str]:
    """Retry every undelivered ending (the sweep, and a parent whose exchange just ended)."""
    done = []
    for run_id in deliveries_due(session_id=session_id):
        try:
            done.append(job_run_deliver(run_id=run_id))
        except Exception:  # one bad run must not block the others
            logger.exception("delivering job run %s failed", run_id)
    return done
