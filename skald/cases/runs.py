"""Troubleshoot (GDL) runs: launch, follow the session's exchanges, human seams, stop.

Every write is one service, atomic, with its audit row; work is enqueued on commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.urls import reverse

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.driver import InputRefused, admit_exchange
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, Outcome, ToolCall, ToolCallStatus
from loop.outcomes import CancelCause, Canceled, outcome_from_receipt
from skald.core import clock
from skald.core.errors import Conflict, NotFound
from skald.loop_adapters.runtime import build_env
from skald.loop_adapters.store import kernel_store
from skald.loop_adapters.work import work_on_commit
from skald.models import Case, Run, RunStatus
from skald.notifications.events import Event as Notice
from skald.notifications.events import EventKind as NoticeKind
from skald.notifications.models import Risk
from skald.notifications.selectors import subjects_announced
from skald.notifications.services import notification_record
from skald.plugins import notify_run_resolved
from skald.sessions.refusals import input_refusal_record
from skald.sessions.services import session_stop

TROUBLESHOOTER = "troubleshooter"
HANDOFF_TOOL = "ask_human"
TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)
SETTLED_STATUS: dict[str, str] = {
    Outcome.COMPLETED: RunStatus.COMPLETED,
    Outcome.TURN_CAP_REACHED: RunStatus.COMPLETED,
    Outcome.BUDGET_EXCEEDED: RunStatus.COMPLETED,
    Outcome.PROVIDER_FAILED: RunStatus.FAILED,
    Outcome.CANCELED: RunStatus.CANCELED,
}


def run_launch(*, user: AbstractBaseUser, case_id: int, ticket: str, launch_key: str) -> tuple[Run, bool]:
    """Create a fresh run, its session and first exchange (the ticket), and schedule it.

    Returns ``(run, created)``; an existing launch key returns its run and does no new work. A
    concurrent launch with the same key is answered like a sequential retry: the unique launch key
    decides the winner inside the transaction, and every loser returns the winner's run.
    """
    key = f"case{case_id}:{launch_key}"
    existing = Run.objects.filter(launch_key=key).first()
    if existing is not None:
        return existing, False
    case = Case.objects.filter(pk=case_id).first()
    if case is None:
        raise NotFound("No such case.", code="case_not_found")
    try:
        return _run_create(user=user, case=case, ticket=ticket, key=key), True
    except InputRefused as exc:  # the run and its session rolled back; the refusal is recorded apart
        raise input_refusal_record(user=user, refused=exc, where="gdl_ticket", subject_type="case",
                                   subject_id=case.pk, size=len(ticket.encode("utf-8"))) from None
    except IntegrityError:
        # A concurrent launch with this key committed first; this transaction rolled back whole.
        winner = Run.objects.filter(launch_key=key).first()
        if winner is None:
            raise
        return winner, False


def _run_create(*, user: AbstractBaseUser, case: Case, ticket: str, key: str) -> Run:
    store = kernel_store()
    with transaction.atomic():
        session = store.create_session(owner_id=user.pk, agent=TROUBLESHOOTER, source="workflow",
                                       title=f"GDL: {case.title}", principal=f"user:{user.pk}")
        now = clock.now()
        run = Run.objects.create(case=case, session=session, ticket=ticket, launched_by_id=user.pk, launch_key=key,
                                 status=RunStatus.QUEUED, created_at=now, updated_at=now)
        audit_append(actor=Actor.user(user), kind=AuditKind.RUN_LAUNCHED, subject_type="run", subject_id=run.pk,
                     payload={"case": case.pk, "session": session.pk, "launch_key": key,
                              "ticket_bytes": len(ticket.encode("utf-8"))})
        exchange, _ = admit_exchange(build_env(session, acting_user_id=user.pk), request_key=key, content=ticket,
                                     author=f"user:{user.pk}")
        work_on_commit("skald.tasks.run_kernel_turn", exchange.pk, key=f"drive:e{exchange.pk}")
    return run


def _status_for(exchange: Exchange) -> tuple[str, str]:
    """The run status an exchange implies, and the handoff question when it is one."""
    if exchange.status == ExchangeStatus.OPEN:
        return RunStatus.RUNNING, ""
    if exchange.status == ExchangeStatus.BROKEN:
        return RunStatus.FAILED, ""
    if exchange.status == ExchangeStatus.PARKED:
        waiting = ToolCall.objects.filter(exchange=exchange, status=ToolCallStatus.AWAITING_HUMAN)
        handoff = waiting.filter(tool=HANDOFF_TOOL).first()
        if handoff is not None:
            return RunStatus.HANDOFF, str(handoff.arguments.get("question", ""))
        return RunStatus.AWAITING_HUMAN, ""
    return SETTLED_STATUS.get(exchange.outcome, RunStatus.COMPLETED), ""


def runs_out_of_step(limit: int = 100) -> list[int]:
    """The newest exchange of each unfinished run whose status no longer matches it (a worker died
    between the exchange's outcome and the run sync): the sweep syncs them."""
    lagging = []
    for run in Run.objects.exclude(status__in=TERMINAL).order_by("id")[:limit]:
        latest = Exchange.objects.filter(session_id=run.session_id).order_by("-number").first()
        if latest is not None and _status_for(latest)[0] != run.status:
            lagging.append(latest.pk)
    return lagging


def run_sync_from_exchange(exchange_id: int) -> Run | None:
    """Bring the run of an exchange's session in step with it; capture proposals when it resolves."""
    exchange = Exchange.objects.filter(pk=exchange_id).first()
    return None if exchange is None else run_sync_for(exchange)


def run_sync_for(exchange: Exchange) -> Run | None:
    """:func:`run_sync_from_exchange` for an exchange row the caller has already read. A session that
    no run follows (a conversation) costs one indexed look, not a locking transaction."""
    if not Run.objects.filter(session_id=exchange.session_id).exists():
        return None
    resolved = False
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(session_id=exchange.session_id).first()
        if run is None:
            return None
        latest = Exchange.objects.filter(session_id=exchange.session_id).order_by("-number").first()
        if latest is not None and latest.pk != exchange.pk:
            exchange = latest  # the run follows its newest exchange
        status, question = _status_for(exchange)
        ended = outcome_from_receipt(exchange.outcome, exchange.receipt)
        closed = isinstance(ended, Canceled) and ended.cause is CancelCause.CLOSED_BY_HUMAN
        if closed:
            status = RunStatus.COMPLETED
        changes: dict[str, Any] = {
            "status": status, "outcome": "closed_by_human" if closed else (exchange.outcome or exchange.error_code),
            "receipt": exchange.receipt, "handoff_question": question, "closed_by_human": closed,
        }
        if all(getattr(run, field) == value for field, value in changes.items()):
            return run
        previous = run.status
        for field, value in changes.items():
            setattr(run, field, value)
        run.updated_at = clock.now()
        run.finished_at = run.updated_at if status in TERMINAL else None
        run.save()
        audit_append(actor=Actor.system("workflow"), kind=AuditKind.RUN_STATUS_CHANGED, subject_type="run",
                     subject_id=run.pk, payload={"from": previous, "to": status, "outcome": run.outcome,
                                                 "exchange": exchange.pk})
        _announce(run, exchange)
        resolved = status == RunStatus.COMPLETED and previous != RunStatus.COMPLETED
    if resolved:
        notify_run_resolved(run)  # proposal capture plugs in here (skald.wiring)
    return run


def _run_for_update(run_id: int) -> Run:
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise NotFound("No such run.", code="run_not_found")
    return run


def _announce(run: Run, exchange: Exchange) -> None:
    """A run that now waits for a person, or failed, is announced in the transaction that says so;
    once per exchange (a back-referral's later handoff is a new one)."""
    if run.status == RunStatus.HANDOFF:
        kind, summary = NoticeKind.HANDOFF_WAITING, f"Run #{run.pk} asks: {run.handoff_question[:200]}"
    elif run.status == RunStatus.FAILED:
        kind, summary = NoticeKind.RUN_FAILED, f"Run #{run.pk} failed ({run.outcome or 'broken'})"
    else:
        return
    notification_record(event=Notice(
        kind=kind, subject=f"run:{run.pk}:e{exchange.pk}", summary=summary,
        link_path=reverse("admin:skald_run_change", args=[run.pk]), occurred_at=run.updated_at,
        requested_by=run.launched_by.get_username(), risk=Risk.MEDIUM, agent=run.session.agent, case=str(run.case_id),
        audience=(run.launched_by_id,), facts={"run": run.pk, "exchange": exchange.pk, "status": run.status,
                                               "outcome": run.outcome, "question": run.handoff_question[:1000]}))


def runs_stuck_announce(limit: int = 200) -> int:
    """The sweep's part: runs queued or running whose session recorded nothing for
    ``SKALD_NOTIFY_RUN_STUCK_MINUTES`` are announced (``run.stuck``), once per stall (a run that moves
    and stalls again is announced again). Returns how many outbox rows were added."""
    cutoff = clock.now() - timedelta(minutes=settings.SKALD_NOTIFY_RUN_STUCK_MINUTES)
    quiet = (Run.objects.filter(status__in=(RunStatus.QUEUED, RunStatus.RUNNING))
             .annotate(last_event=Max("session__events__created_at"), last_seq=Max("session__events__seq"))
             .filter(Q(last_event__lte=cutoff) | Q(last_event__isnull=True, updated_at__lte=cutoff))
             .select_related("launched_by", "session").order_by("id")[:limit])
    stalls = {f"run:{run.pk}:stuck:{run.last_seq or 0}": run for run in quiet}  # type: ignore[attr-defined]
    added = 0
    for subject in set(stalls) - subjects_announced(NoticeKind.RUN_STUCK, list(stalls)):
        run = stalls[subject]
        since = run.last_event or run.updated_at  # type: ignore[attr-defined]
        with transaction.atomic():
            added += len(notification_record(event=Notice(
                kind=NoticeKind.RUN_STUCK, subject=subject,
                summary=f"Run #{run.pk} has recorded nothing since {since:%Y-%m-%d %H:%M} UTC ({run.status})",
                link_path=reverse("admin:skald_run_change", args=[run.pk]), occurred_at=clock.now(),
                requested_by=run.launched_by.get_username(), risk=Risk.MEDIUM, agent=run.session.agent,
                case=str(run.case_id), audience=(run.launched_by_id,),
                facts={"run": run.pk, "status": run.status, "quiet_since": since.isoformat()})))
    return added


def run_handoff_decide(*, user: AbstractBaseUser, run_id: int, decision: str, note: str) -> Run:
    """Answer a handoff: ``continue`` appends the note as the human's answer and resumes the run;
    ``close`` ends it as closed by a human. Wrong state → 409 ``run_state_conflict``."""
    with transaction.atomic(durable=True):
        run = _run_for_update(run_id)
        if run.status != RunStatus.HANDOFF:
            raise Conflict(f"The run is {run.status}, not waiting on a handoff.", code="run_state_conflict",
                           status=run.status)
        call = ToolCall.objects.filter(session_id=run.session_id, tool=HANDOFF_TOOL,
                                       status=ToolCallStatus.AWAITING_HUMAN).order_by("-id").first()
        if call is None:
            raise Conflict("No handoff is waiting on this run.", code="run_state_conflict", status=run.status)
        audit_append(actor=Actor.user(user), kind=AuditKind.RUN_HANDOFF_DECIDED, subject_type="run",
                     subject_id=run.pk, payload={"decision": decision, "note": note[:2000], "tool_call": call.pk})
        kernel_store().append_event(
            session_id=run.session_id, kind=EventKind.HANDOFF,
            payload={"decision": decision, "note": note[:2000], "by": f"user:{user.pk}", "tool_call_id": call.pk},
            key=f"handoff:{call.pk}:{decision}", principal=f"user:{user.pk}", exchange_id=call.exchange_id,
        )
        resolution = "answer" if decision == "continue" else "close"
        work_on_commit("skald.tasks.resolve_pending_call", call.pk, resolution, note[:2000], key=f"resolve:c{call.pk}")
    run.refresh_from_db()
    return run


def run_back_refer(*, user: AbstractBaseUser, run_id: int, note: str) -> Run:
    """Send a completed or closed run back to the agent with a note, on the same session."""
    try:
        return _back_refer(user=user, run_id=run_id, note=note)
    except InputRefused as exc:
        raise input_refusal_record(user=user, refused=exc, where="gdl_back_referral", subject_type="run",
                                   subject_id=run_id, size=len(note.encode("utf-8"))) from None


def _back_refer(*, user: AbstractBaseUser, run_id: int, note: str) -> Run:
    with transaction.atomic(durable=True):
        run = _run_for_update(run_id)
        if run.status != RunStatus.COMPLETED:
            raise Conflict(f"Only a completed or closed run can be sent back; this one is {run.status}.",
                           code="run_state_conflict", status=run.status)
        number = Exchange.objects.filter(session_id=run.session_id).count() + 1
        audit_append(actor=Actor.user(user), kind=AuditKind.RUN_BACK_REFERRED, subject_type="run",
                     subject_id=run.pk, payload={"note": note[:2000]})
        exchange, _ = admit_exchange(build_env(run.session, acting_user_id=user.pk),
                                     request_key=f"{run.launch_key}:back-referral:{number}",
                                     content=f"[back-referral from a human operator]\n{note}",
                                     author=f"user:{user.pk}")
        run.status, run.closed_by_human, run.finished_at = RunStatus.RUNNING, False, None
        run.updated_at = clock.now()
        run.save(update_fields=["status", "closed_by_human", "finished_at", "updated_at"])
        work_on_commit("skald.tasks.run_kernel_turn", exchange.pk, key=f"drive:e{exchange.pk}")
    return run


def run_stop(*, user: AbstractBaseUser, run: Run) -> Run:
    """Stop the run's session and bring the run in step, in one transaction: the stop request, the
    cancelled async tasks, a parked exchange settled Canceled and the run's new status commit
    together or not at all."""
    with transaction.atomic(durable=True):
        exchange = session_stop(user=user, session=run.session)
        if exchange is not None:
            run_sync_from_exchange(exchange.pk)
    run.refresh_from_db()
    return run
