"""django-q2 entry points. Each parses its arguments and delegates; no worker waits on a human."""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from approvals.pending.notices import approval_notices_due
from approvals.pending.services import approvals_expire
from audit.services import chain_verify_incremental
from loop.errors import LeaseLost
from loop.models import Exchange, ExchangeStatus, ToolCall
from loop.recovery import recover_exchange, resolve_pending
from skald.cases.runs import run_sync_for, runs_out_of_step, runs_stuck_announce
from skald.core import clock
from skald.core.ids import new_token
from skald.core.queue import enqueue_now
from skald.jobs import delivery, runner
from skald.loop_adapters.runtime import build_env
from skald.loop_adapters.store import kernel_store
from skald.loop_adapters.work import work_due, work_run
from skald.notifications.events import Event as Notice
from skald.notifications.events import EventKind as NoticeKind
from skald.notifications.models import Risk
from skald.notifications.selectors import deliveries_due
from skald.notifications.send import delivery_send
from skald.notifications.services import notification_record
from skald.sessions import services as session_services

logger = logging.getLogger(__name__)


def run_kernel_turn(exchange_id: int) -> str:
    """Drive an admitted exchange (a user message) to a settled or parked outcome (SPEC R3).

    A dangling call of a long-dead turn on the session is repaired first. The exchange is claimed
    like any recovery: a redelivered task finds it held (nothing to do) or continues what a lost
    worker left.
    """
    exchange = Exchange.objects.select_related("session").get(pk=exchange_id)
    if exchange.claimed_at is not None:  # never claimed: it is the session's one active exchange, nothing is stale
        session_services.repair_stale_exchange(session=exchange.session)
    return _recover(exchange)


def recover_turn(session_id: int) -> str:
    """Continue what was interrupted in a session, without a new message (SPEC R3): a websocket
    connect, an async result, a wake-up or the sweep. Nothing happens when a live driver holds it."""
    exchange = kernel_store().exchanges.active(session_id)
    if exchange is None:
        return "nothing active"
    return _recover(Exchange.objects.select_related("session").get(pk=exchange.pk))


def _recover(exchange: Exchange) -> str:
    if exchange.status not in (ExchangeStatus.OPEN, ExchangeStatus.PARKED):
        after_exchange(exchange.pk)  # a redelivery after the outcome: the run still follows it
        return exchange.status
    try:
        env = build_env(exchange.session, exchange_id=exchange.pk)
        result = recover_exchange(env, exchange.pk, claim_token=new_token(), read=exchange)
    except LeaseLost:  # this worker stalled past its lease; the driver that took over goes on
        logger.warning("exchange %s: lease lost to another driver", exchange.pk)
        return "lease lost"
    finally:
        after_exchange(exchange.pk)
    return result.outcome.name if result is not None else "held by a live driver"


def after_exchange(exchange_id: int) -> None:
    """Product follow-ups of a settled or parked exchange (runs, proposals, jobs) hook in here."""
    exchange = Exchange.objects.filter(pk=exchange_id).first()  # read once for every follow-up
    if exchange is None:
        return
    try:
        run_sync_for(exchange)
    except Exception:  # the exchange's own outcome is already durable
        logger.exception("run sync after exchange %s failed", exchange_id)
    try:
        runner.job_sync_for(exchange)  # a job's own exchange ended later
        delivery.deliver_due(session_id=exchange.session_id)  # endings that waited for this parent to be idle
    except Exception:
        logger.exception("job follow-up after exchange %s failed", exchange_id)


def run_job(job_id: int) -> str:
    """Run an async task (or one firing of a cron job) to its classified ending (SPEC S4)."""
    return runner.run_job(job_id)


def run_cron_job(job_id: int) -> str:
    """What a cron job's django-q2 schedule calls on each firing."""
    return runner.run_job(job_id)


def deliver_job_run(run_id: int) -> str:
    """Deliver one ended run from the one delivery site (a redelivery is a no-op)."""
    return delivery.job_run_deliver(run_id=run_id)


def deliver_due_jobs() -> int:
    """Scheduled every minute and at boot: retry every ending not delivered yet (a killed worker),
    and pick up jobs a lost worker or queue message left behind."""
    return runner.reap_lost() + len(delivery.deliver_due())


def resolve_pending_call(tool_call_id: int, resolution: str, reason: str = "") -> str:
    """Continue after a human answered (or an approval expired): run or settle the call, then
    drive the exchange on when nothing else of it waits. Works the same after any restart.

    Raises:
        ResolverBusy: another answer of the same batch is being carried out; the outbox row falls
            due again after one lease.
    """
    call = ToolCall.objects.select_related("session", "frame").get(pk=tool_call_id)
    env = build_env(call.session, exchange_id=call.exchange_id)
    try:
        result = resolve_pending(env, call, resolution=resolution,  # type: ignore[arg-type]
                                 reason=reason, claim_token=new_token())
    except LeaseLost:  # this worker stalled past its lease; the driver that took over goes on
        logger.warning("exchange %s: lease lost to another driver", call.exchange_id)
        return "lease lost"
    finally:
        after_exchange(call.exchange_id)
    return result.outcome.name if result is not None else "settled call"


def run_work(work_id: int) -> str:
    """Carry out one outbox row (``skald.loop_adapters.work``)."""
    return work_run(work_id)


def sweep() -> dict[str, int]:
    """Hand out what nothing is doing (SPEC R2): outbox rows that fell due again, exchanges no live
    driver holds (a lapsed lease, a lost task, answered but never continued), runs out of step with
    their exchange. Any worker may run it, any number of times: every hand-out is claimed."""
    due = work_due()
    for work_id in due:
        enqueue_now("skald.tasks.run_work", work_id)
    stranded = kernel_store().exchanges.needing_recovery(unclaimed_for=settings.SKALD_LEASE_SECONDS)
    for exchange_id in stranded:
        enqueue_now("skald.tasks.recover_exchange_task", exchange_id)
    lagging = runs_out_of_step()
    for exchange_id in lagging:
        after_exchange(exchange_id)
    return {"work": len(due), "exchanges": len(stranded), "runs": len(lagging), **sweep_notifications()}


def sweep_notifications() -> dict[str, int]:
    """Record the time-based notices (escalation, about to expire) and send every delivery that is
    due: one whose send never ran (a crash after the commit) or a failing one whose backoff ended."""
    noticed = 0
    for finder in (approval_notices_due, runs_stuck_announce):
        try:
            noticed += finder()
        except Exception:  # the rest of the sweep (and the sends below) must not wait on it
            logger.exception("%s failed", finder.__name__)
    due = deliveries_due(now=clock.now())
    for delivery_id in due:
        enqueue_now("skald.tasks.notify_deliver", delivery_id, group="notify")
    return {"notices": noticed, "deliveries": len(due)}


def watch_audit_chain() -> str:
    """Scheduled every five minutes: verify what was appended since the last pass; a broken chain
    is announced once per first bad row (``audit.chain_broken``) to the auditors' subscriptions."""
    report, _tip = chain_verify_incremental()
    if report.ok:
        return "ok"
    with transaction.atomic():
        notification_record(event=Notice(
            kind=NoticeKind.AUDIT_CHAIN_BROKEN, subject=f"audit:seq{report.first_bad_seq}",
            summary=f"The audit chain does not verify at row {report.first_bad_seq}: {report.reason}"[:300],
            link_path=reverse("admin:audit_auditevent_verify"), occurred_at=clock.now(), risk=Risk.HIGH,
            facts={"first_bad_seq": report.first_bad_seq, "reason": report.reason, "rows": report.rows}))
    return f"broken at {report.first_bad_seq}"


def notify_deliver(delivery_id: int) -> str:
    """Attempt one notification (``skald.notifications.send``); not due: nothing happens."""
    return delivery_send(delivery_id)


def recover_exchange_task(exchange_id: int) -> str:
    return _recover(Exchange.objects.select_related("session").get(pk=exchange_id))


def expire_approvals() -> int:
    """Scheduled every minute: expire overdue approvals so no conversation wedges."""
    return approvals_expire()


def repair_stale_exchanges() -> int:
    """Scheduled every minute: repair turns whose worker died (typed interrupted results, R3)."""
    repaired = session_services.repair_stale_exchanges()
    for exchange_id in repaired:
        after_exchange(exchange_id)
    return len(repaired)
