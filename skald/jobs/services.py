"""Job writes: submit, start, finish (the one classification), cancel. Each is one transaction with
its audit row and the parent conversation's ``TaskUpdate`` row; work is enqueued on commit.

A ``TaskUpdate`` is a ``control:task_update`` row in the *parent* session: viewers of that
conversation (its source) receive it over the websocket, and a reconnect replays it like any row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import F
from django.urls import reverse
from django_q.models import Schedule

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.events import EventKind
from loop.failpoints import failpoint
from loop.masking import withhold_credentials
from loop.models import Exchange, ExchangeStatus, Session
from loop.outcomes import outcome_from_receipt
from skald import plugins
from skald.core import clock
from skald.core.errors import Conflict, NotFound
from skald.core.ids import new_token
from skald.core.queue import enqueue_on_commit
from skald.jobs.classify import Ending, classify, crashed
from skald.jobs.models import JobKind, JobRun, JobStatus, RunEnding, ScheduledJob
from skald.jobs.output import partial_output, run_output
from skald.loop_adapters.store import kernel_store
from skald.notifications.events import Event as Notice
from skald.notifications.events import EventKind as NoticeKind
from skald.notifications.models import Risk
from skald.notifications.services import notification_record
from skald.sessions.parked import TASK_WITHDRAWN, stop_unheld

TASK_UPDATE = EventKind.TASK_UPDATE
TASKS_ACTOR = Actor.system("tasks")
RUN_TASK = "skald.tasks.run_job"
DELIVER = "skald.tasks.deliver_job_run"
FOLLOW_EXCHANGE = "skald.tasks.recover_exchange_task"  # a settled exchange: its run is classified and delivered


_JOB_KEY = re.compile(r"^job:(\d+):run:(\d+)$")


def job_request_key(job: ScheduledJob, run_number: int) -> str:
    """The child exchange's request key: a re-run of the same job run admits nothing new."""
    return f"job:{job.pk}:run:{run_number}"


def delivery_request_key(job: ScheduledJob, run_number: int) -> str:
    """The parent's delivery exchange key: a redelivery is a no-op (SPEC S4)."""
    return f"job:{job.pk}:run:{run_number}:delivery"


CRON_OUTPUT_CLIP = 1000


def task_payload(job: ScheduledJob, run: JobRun | None = None) -> dict[str, Any]:
    """What a ``TaskUpdate`` says and what ``GET /api/{source}/tasks`` lists for one job. An ended
    cron run also carries its output, clipped and screened, and its own conversation: the home
    conversation is where its result reaches the user (issue 27 §7)."""
    payload: dict[str, Any] = {
        "job": job.pk, "kind": job.kind, "status": run.status if run is not None else job.status,
        "agent": job.agent, "task": job.task[:200], "child_session": job.child_session_id,
        "parent_session": job.parent_session_id, "run": run.number if run is not None else None,
        "delivered": bool(run is not None and run.delivered_at is not None),
        "error": run.error if run is not None else "",
    }
    if job.kind == JobKind.CRON and run is not None and run.status != RunEnding.RUNNING:
        output = run.output.strip()
        clipped = output if len(output) <= CRON_OUTPUT_CLIP else output[:CRON_OUTPUT_CLIP] + " …"
        payload["output"] = withhold_credentials(clipped, what="cron output", detector=plugins.tripwire_detector())
        payload["child_session"] = run.session_id  # the firing's own conversation, for the whole text
    return payload


def announce(job: ScheduledJob, run: JobRun | None = None) -> None:
    """Append the job's ``TaskUpdate`` to its parent conversation (a cron job's to its home one),
    inside the caller's transaction. A job with neither belongs to nobody's chat."""
    session_id = job.parent_session_id or job.home_session_id
    if session_id is None:
        return
    payload = task_payload(job, run)
    state = f"{payload['status']}{':delivered' if payload['delivered'] else ''}"
    kernel_store().append_event(
        session_id=session_id, kind=TASK_UPDATE, payload=payload, principal="system:tasks",
        key=f"s{session_id}:job{job.pk}:r{payload['run'] or 0}:{state}",
    )


def lock_conversation(session_id: int | None) -> None:
    """Take the conversation's row lock before any audit row of the transaction.

    The kernel appends a narrative row (the session row lock) before its audit row (the chain's
    lock); a job transaction that announces into a conversation takes them in the same order, so
    a parallel sibling writing to that conversation can never deadlock with it.
    """
    if session_id is not None:
        Session.objects.select_for_update().filter(pk=session_id).values_list("pk", flat=True).first()


def _audit(kind: AuditKind, job: ScheduledJob, payload: Mapping[str, Any], actor: Actor = TASKS_ACTOR) -> None:
    audit_append(actor=actor, kind=kind, subject_type="job", subject_id=job.pk, payload=dict(payload))


def job_submit_task(
    *,
    owner_id: int,
    source: str,
    parent_session_id: int,
    parent_exchange_id: int | None,
    parent_call_id: int | None,
    agent: str,
    task: str,
    tools: Sequence[str],
    exec_allowlist: Sequence[str] | None = None,
    budget_tokens: int | None = None,
    client: str,
    selection: Mapping[str, Any],
    scope_extras: Mapping[str, Any],
) -> ScheduledJob:
    """Write a ``task`` job and its child conversation, announce it, and enqueue it on commit.

    Idempotent per spawning call: a call that runs again (recovery) gets the job it started.
    """
    if parent_call_id is not None:
        existing = ScheduledJob.objects.filter(parent_call_id=parent_call_id).first()
        if existing is not None:
            return existing
    with transaction.atomic():
        lock_conversation(parent_session_id)
        child = kernel_store().create_session(owner_id=owner_id, agent=agent, source="task",
                                              title=f"task: {task[:80]}", principal=f"user:{owner_id}")
        now = clock.now()
        job = ScheduledJob.objects.create(
            kind=JobKind.TASK, status=JobStatus.QUEUED, owner_id=owner_id, source=source, agent=agent, task=task,
            tools=list(tools), exec_allowlist=None if exec_allowlist is None else list(exec_allowlist),
            client=client, selection=dict(selection), scope_extras=dict(scope_extras), budget_tokens=budget_tokens,
            parent_session_id=parent_session_id, parent_exchange_id=parent_exchange_id,
            parent_call_id=parent_call_id, child_session=child, created_at=now, updated_at=now,
        )
        _audit(AuditKind.JOB_CREATED, job, {"kind": job.kind, "agent": agent, "parent_session": parent_session_id,
                                            "parent_call": parent_call_id, "child_session": child.pk,
                                            "tools": sorted(tools), "selection": dict(selection),
                                            "exec_allowlist": None if exec_allowlist is None else list(exec_allowlist),
                                            "budget_tokens": budget_tokens},
               Actor.parse(f"user:{owner_id}"))
        announce(job)
        enqueue_on_commit(RUN_TASK, job.pk)
    return job


def _set_job_status(job: ScheduledJob, status: str) -> None:
    job.status = status
    job.updated_at = clock.now()
    ScheduledJob.objects.filter(pk=job.pk).update(status=status, updated_at=job.updated_at)


def job_run_start(*, job_id: int) -> JobRun | None:
    """Open the job's next run. A task job runs once: a second start (a redelivered queue message)
    gets None, as does a job cancelled before it started."""
    with transaction.atomic(durable=True):
        job = ScheduledJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return None
        if job.kind == JobKind.TASK and job.status != JobStatus.QUEUED:
            return None
        if job.kind == JobKind.CRON and job.status != JobStatus.SCHEDULED:
            return None
        lock_conversation(job.parent_session_id or job.home_session_id)
        number = job.runs.count() + 1
        session: Session | None = job.child_session
        if job.kind == JobKind.CRON:  # each firing is its own conversation
            session = kernel_store().create_session(owner_id=job.owner_id, agent=job.agent, source="cron",
                                                    title=f"cron #{job.pk} run {number}",
                                                    principal=f"user:{job.owner_id}")
        run = JobRun.objects.create(job=job, number=number, status=RunEnding.RUNNING, session=session,
                                    started_at=clock.now())
        if job.kind == JobKind.TASK:
            _set_job_status(job, JobStatus.RUNNING)
        _audit(AuditKind.JOB_STATE_CHANGED, job, {"run": number, "to": RunEnding.RUNNING})
        announce(job, run)
    return run


def _return_unspent(job: ScheduledJob, run: JobRun, exchange_id: int | None) -> int | None:
    """Give back to the ledger the task reserved from (its spawning exchange's) what the run did not
    spend, inside the caller's transaction: the run's ending, so exactly once (issue 27 §2). A run
    whose spend is unknown (accounting incomplete) gives back nothing. None: nothing was reserved."""
    if job.kind != JobKind.TASK or job.budget_tokens is None or job.parent_exchange_id is None:
        return None
    spent = 0
    if exchange_id is None and run.session_id is not None:  # admitted, but the link was never written
        exchange = Exchange.objects.filter(session_id=run.session_id,
                                           request_key=job_request_key(job, run.number)).first()
    else:
        exchange = Exchange.objects.filter(pk=exchange_id).first() if exchange_id is not None else None
    if exchange is not None:
        if exchange.accounting_incomplete:
            return 0
        # Its ledger (its own calls and what it reserved for its own tasks), never below what its
        # calls used (a run that broke may not have saved its ledger).
        spent = max(exchange.reserved_tokens - exchange.returned_tokens, exchange.input_tokens + exchange.output_tokens)
    unspent = max(0, job.budget_tokens - spent)
    _credit(job.parent_exchange_id, unspent)
    run.returned_tokens = unspent
    return unspent


def _credit(exchange_id: int, tokens: int) -> None:
    """Credit a ledger. When it is the exchange of a task whose run has ended already (its own return
    counted this reservation as spent), what comes back goes on up to the ledger that task reserved
    from, and so on to the root. That run's row is locked first, so its ending and this credit never
    interleave (the ending reads its exchange's ledger under the same lock)."""
    store = kernel_store()
    target: int | None = exchange_id
    while target is not None and tokens > 0:
        holder = (JobRun.objects.select_for_update(of=("self",)).select_related("job")
                  .filter(exchange_id=target, job__kind=JobKind.TASK).first())
        store.exchanges.return_reserved(target, tokens)
        if holder is None or holder.status == RunEnding.RUNNING or holder.returned_tokens is None:
            return
        JobRun.objects.filter(pk=holder.pk).update(returned_tokens=F("returned_tokens") + tokens)
        target = holder.job.parent_exchange_id


def job_run_finish(*, run_id: int, ending: Ending, output: str = "", exchange_id: int | None = None) -> JobRun | None:
    """Record a run's ending exactly once and enqueue its delivery on commit.

    Returns None when the run had already ended (a second classifier changes nothing).
    """
    with transaction.atomic(durable=True):
        run = JobRun.objects.select_for_update().select_related("job").filter(pk=run_id).first()
        if run is None or run.status != RunEnding.RUNNING:
            return None
        lock_conversation(run.job.parent_session_id or run.job.home_session_id)
        run.status, run.outcome, run.error = ending.status, ending.outcome, ending.reason[:300]
        run.output = output[:16000]
        run.ended_at = clock.now()
        if exchange_id is not None:
            run.exchange_id = exchange_id
        job = run.job
        returned = _return_unspent(job, run, run.exchange_id)
        run.save(update_fields=["status", "outcome", "error", "output", "ended_at", "exchange", "returned_tokens"])
        if job.kind == JobKind.TASK:
            _set_job_status(job, ending.status)
        _audit(AuditKind.JOB_STATE_CHANGED, job, {"run": run.number, "to": ending.status, "outcome": ending.outcome,
                                                  "reason": ending.reason[:200],
                                                  **({} if returned is None else {"returned_tokens": returned})})
        announce(job, run)
        # A worker lost here (the ending committed, its delivery never enqueued) strands nothing:
        # the sweep delivers every ended, undelivered run (the crash campaign's jobs points).
        transaction.on_commit(lambda: failpoint("jobs.after_run_end"))
        enqueue_on_commit(DELIVER, run.pk)
    return run


def job_cancel(*, job_id: int, principal: str) -> ScheduledJob:
    """Cancel a job: a queued task ends ``cancelled`` at once (and is delivered), a running one is
    stopped through its child exchange (sticky; its run ends ``cancelled``), a cron job stops firing.

    Raises:
        NotFound: ``job_not_found``.
        Conflict: ``job_not_active`` when it has ended already.
    """
    store = kernel_store()
    with transaction.atomic():
        job = ScheduledJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise NotFound("No such job.", code="job_not_found")
        lock_conversation(job.parent_session_id or job.home_session_id)
        actor = Actor.parse(principal)
        if job.kind == JobKind.CRON:
            if job.status != JobStatus.SCHEDULED:
                raise Conflict("The cron job is not scheduled.", code="job_not_active")
            Schedule.objects.filter(pk=job.schedule_id).delete()  # it stops firing
            _set_job_status(job, JobStatus.CANCELLED)
            _audit(AuditKind.JOB_STATE_CHANGED, job, {"to": JobStatus.CANCELLED}, actor)
            return job
        if job.status == JobStatus.QUEUED:
            _set_job_status(job, JobStatus.CANCELLED)
            run = JobRun(job=job, number=1, status=RunEnding.CANCELLED, outcome="canceled",
                         error="cancelled before it started", session=job.child_session,
                         started_at=clock.now(), ended_at=clock.now())
            returned = _return_unspent(job, run, None)  # it spent nothing: the whole reservation
            run.save()
            _audit(AuditKind.JOB_STATE_CHANGED, job, {"run": 1, "to": RunEnding.CANCELLED,
                                                      **({} if returned is None else {"returned_tokens": returned})},
                   actor)
            announce(job, run)
            enqueue_on_commit(DELIVER, run.pk)
            return job
        if job.status != JobStatus.RUNNING:
            raise Conflict("The task has ended already.", code="job_not_active")
        # Sticky: a runner that admits its exchange after this commits finds the request there.
        ScheduledJob.objects.filter(pk=job.pk).update(cancel_requested_at=clock.now())
        _audit(AuditKind.JOB_STATE_CHANGED, job, {"cancel_requested": True}, actor)
        active = Exchange.objects.filter(session_id=job.child_session_id or 0,
                                         request_key=job_request_key(job, 1)).first()
        if active is not None:
            store.exchanges.request_cancel(active.pk, principal=principal)
    if active is not None:
        _stop_unheld_run(active.pk, principal=principal)
    return job


def _stop_unheld_run(exchange_id: int, *, principal: str) -> None:
    """A run parked on an approval has no driver to see the stop: it is settled here, as a session
    stop settles one, with its waiting calls and their approvals (withdrawn: answering one is a
    409); the run ends ``cancelled`` as that commits, and its delivery is enqueued (issue 27 §6).
    A run a live driver holds sees the sticky request instead."""
    store = kernel_store()
    with transaction.atomic():
        if store.exchanges.claim_for_recovery(exchange_id, new_token(), principal=principal, reason="stop"):
            stop_unheld(store.exchanges.get(exchange_id), principal=principal, ending=TASK_WITHDRAWN)
            # The run ends once this commits, in the cancelling request, not when a worker gets to
            # the follow-up: the cancel's answer already says cancelled (issue 27 §6).
            transaction.on_commit(partial(job_sync_from_exchange, exchange_id))
            enqueue_on_commit(FOLLOW_EXCHANGE, exchange_id)


def job_sync_from_exchange(exchange_id: int) -> JobRun | None:
    """A job's exchange that ended later (after an approval, a cancel while it was parked, or
    repaired after a lost worker) ends its run here: the same classification, once."""
    exchange = Exchange.objects.filter(pk=exchange_id).first()
    return None if exchange is None else job_sync_for(exchange)


def job_sync_for(exchange: Exchange) -> JobRun | None:
    """:func:`job_sync_from_exchange` for an exchange row the caller has already read."""
    if exchange.status not in (ExchangeStatus.SETTLED, ExchangeStatus.BROKEN):
        return None
    match = _JOB_KEY.match(exchange.request_key)
    if match is None:
        return None
    run = JobRun.objects.filter(job_id=int(match.group(1)), number=int(match.group(2)),
                                status=RunEnding.RUNNING).first()
    if run is None:
        return None
    if exchange.status == ExchangeStatus.BROKEN:
        ending = crashed(f"the run broke ({exchange.error_code})")
        output = partial_output(exchange.session_id)
    else:
        outcome = outcome_from_receipt(exchange.outcome, exchange.receipt, turns=exchange.turns)
        ending, output = classify(outcome), run_output(outcome, exchange.session_id)
    return job_run_finish(run_id=run.pk, ending=ending, output=output, exchange_id=exchange.pk)


def job_cancel_for_session(*, session_id: int, principal: str) -> list[int]:
    """A stop of a conversation stops the async tasks it started (one cancellation tree)."""
    ids = list(ScheduledJob.objects.filter(parent_session_id=session_id, kind=JobKind.TASK,
                                           status__in=[JobStatus.QUEUED, JobStatus.RUNNING])
               .values_list("pk", flat=True))
    for job_id in ids:
        try:
            job_cancel(job_id=job_id, principal=principal)
        except Conflict:  # it ended meanwhile
            continue
    return ids


DEAD_LETTER_AFTER = 5  # deliveries that raised before the run is parked for an operator


def job_run_delivery_failed(*, run_id: int, error: str) -> JobRun | None:
    """Count a delivery that raised; the ``DEAD_LETTER_AFTER``-th parks the run as a dead letter
    (the sweep skips it, so one bad row never blocks the others; issue 27 §4). Audited."""
    with transaction.atomic():
        run = JobRun.objects.select_for_update().select_related("job").filter(pk=run_id).first()
        if run is None or run.delivered_at is not None or run.dead_lettered_at is not None:
            return run
        run.delivery_attempts += 1
        run.delivery_error = error[:300]
        fields = ["delivery_attempts", "delivery_error"]
        if run.delivery_attempts >= DEAD_LETTER_AFTER:
            run.dead_lettered_at = clock.now()
            fields.append("dead_lettered_at")
            _audit(AuditKind.JOB_STATE_CHANGED, run.job, {"run": run.number, "dead_letter": True,
                                                          "attempts": run.delivery_attempts, "error": error[:300]})
            _announce_dead_letter(run)
        run.save(update_fields=fields)
    return run


def _announce_dead_letter(run: JobRun) -> None:
    job = run.job
    notification_record(event=Notice(
        kind=NoticeKind.TASK_DEAD_LETTERED, subject=f"jobrun:{run.pk}",
        summary=f"Task #{job.pk} ({job.agent}) could not be delivered after {run.delivery_attempts} attempts",
        link_path=reverse("admin:skald_jobrun_change", args=[run.pk]), occurred_at=run.dead_lettered_at or clock.now(),
        requested_by=job.owner.get_username(), risk=Risk.MEDIUM, agent=job.agent, audience=(job.owner_id,),
        facts={"job": job.pk, "run": run.number, "error": run.delivery_error}))


def job_run_delivery_retry(*, run_id: int, principal: str) -> JobRun:
    """An operator retries a dead letter: it is due again (attempts start over) and one delivery is
    enqueued on commit. Audited.

    Raises:
        NotFound: ``job_run_not_found``.
        Conflict: ``job_run_not_dead_letter`` when it is not parked.
    """
    with transaction.atomic(durable=True):
        run = JobRun.objects.select_for_update().select_related("job").filter(pk=run_id).first()
        if run is None:
            raise NotFound("No such job run.", code="job_run_not_found")
        if run.dead_lettered_at is None or run.delivered_at is not None:
            raise Conflict("The run is not a dead letter.", code="job_run_not_dead_letter")
        run.dead_lettered_at, run.delivery_attempts = None, 0
        run.save(update_fields=["dead_lettered_at", "delivery_attempts"])
        _audit(AuditKind.JOB_STATE_CHANGED, run.job, {"run": run.number, "dead_letter": False, "retried": True},
               Actor.parse(principal))
        # Lost here, the retry has committed (the run is due again) and the sweep delivers it.
        transaction.on_commit(lambda: failpoint("jobs.during_dead_letter_retry"))
        enqueue_on_commit(DELIVER, run.pk)
    return run
