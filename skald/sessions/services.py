"""Session writes: each delegates to the kernel store (audited) and schedules work on commit."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q, QuerySet

from loop.driver import InputRefused, LoopEnv, admit_exchange
from loop.errors import AdmissionRefused, HarnessError, HookError, PayloadTooLarge
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, Session, ToolCall, ToolCallStatus
from loop.recovery import repair_dangling
from skald.core import clock
from skald.core.errors import Conflict, SkaldError
from skald.core.ids import new_token
from skald.core.queue import queue_wait_for_room
from skald.core.roles import Role, has_role
from skald.jobs.services import job_cancel_for_session
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.runtime import build_env
from skald.loop_adapters.store import kernel_store
from skald.loop_adapters.work import work_on_commit
from skald.models import Case
from skald.sessions.defaults import DEFAULT_AGENT
from skald.sessions.parked import stop_unheld
from skald.sessions.refusals import input_refusal_record

MAX_MESSAGE_BYTES = 64 * 1024


def session_create(
    *, user: AbstractBaseUser, agent: str | None = None, source: str = "web", title: str = "",
    case_id: int | None = None,
) -> Session:
    """A new session; with ``case_id`` it is attached to that case (its tools read the case's logs)."""
    name = agent or DEFAULT_AGENT
    try:
        AgentRowCatalog().get(name)
    except HarnessError as exc:
        raise SkaldError(str(exc), code="agent_unknown", http_status=404) from None
    if case_id is not None:
        _check_case(user=user, case_id=case_id)
    with transaction.atomic(durable=True):
        session = kernel_store().create_session(owner_id=user.pk, agent=name, source=source, title=title,
                                                principal=f"user:{user.pk}")
        if case_id is not None:
            session_attach_case(user=user, session=session, case_id=case_id)
    return session


def _check_case(*, user: AbstractBaseUser, case_id: int) -> None:
    if not has_role(user, Role.OPERATOR):
        raise SkaldError("Only operators attach sessions to cases.", code="case_forbidden", http_status=403)
    if not Case.objects.filter(pk=case_id).exists():
        raise SkaldError("No such case.", code="case_unknown", http_status=404)


def session_attach_case(*, user: AbstractBaseUser, session: Session, case_id: int) -> None:
    """Attach a console session to a case, as an audited ``control:note`` in its narrative (rows
    are never mutated; the latest attachment counts). Its tools then read that case's logs."""
    _check_case(user=user, case_id=case_id)
    kernel_store().append_event(
        session_id=session.pk, kind=EventKind.NOTE, payload={"attached_case": case_id},
        key=f"s{session.pk}:case:{case_id}:{new_token()}", principal=f"user:{user.pk}",
    )


def session_message_submit(
    *, user: AbstractBaseUser, session: Session, content: str, request_key: str | None = None
) -> tuple[Exchange, bool]:
    """Admit a user message idempotently and schedule its exchange on a worker.

    Returns ``(exchange, replayed)``; a replayed key returns the same exchange and does no work.
    """
    if not content.strip():
        raise SkaldError("content must not be empty", code="message_invalid", http_status=400)
    if len(content.encode("utf-8")) > MAX_MESSAGE_BYTES:
        raise SkaldError(f"content is over {MAX_MESSAGE_BYTES} bytes", code="message_too_large", http_status=400)
    queue_wait_for_room()  # backpressure before anything is stored: 503 queue_saturated
    env = build_env(session, acting_user_id=user.pk)  # the writer's groups gate the turn, never the owner's
    repair_stale_exchange(session=session)
    key = request_key or new_token()
    try:
        return _admit(env, user=user, key=key, content=content)
    except InputRefused as exc:  # outside the rolled-back transaction, so the refusal's audit row stays
        raise input_refusal_record(user=user, refused=exc, where="chat_message", subject_type="session",
                                   subject_id=session.pk, size=len(content.encode("utf-8"))) from None


def _admit(env: LoopEnv, *, user: AbstractBaseUser, key: str, content: str) -> tuple[Exchange, bool]:
    with transaction.atomic():
        try:
            exchange, replayed = admit_exchange(env, request_key=key, content=content, author=f"user:{user.pk}")
        except HookError as exc:
            raise SkaldError(str(exc), code=exc.code, http_status=403) from None
        except AdmissionRefused as exc:
            raise Conflict(str(exc), code=exc.code) from None
        except PayloadTooLarge:  # the row as stored (JSON, the author) is bigger than the text
            raise SkaldError(f"the stored message would be over the {MAX_MESSAGE_BYTES}-byte payload cap",
                             code="message_too_large", http_status=400) from None
        if not replayed:
            work_on_commit("skald.tasks.run_kernel_turn", exchange.pk, key=f"drive:e{exchange.pk}")
    return exchange, replayed


def _stale_exchanges(session: Session | None = None) -> QuerySet[Exchange]:
    """Open exchanges claimed longer ago than any task may run (their worker died), and exchanges
    an infrastructure failure broke mid-call (their calls still wait for a result)."""
    stale_before = clock.now() - timedelta(seconds=settings.SKALD_CLAIM_STALE_SECONDS)
    worker_died = Q(status=ExchangeStatus.OPEN, claimed_at__lt=stale_before) & ~Q(claim_token="")
    dangling = ToolCall.objects.filter(status__in=[ToolCallStatus.PLANNED, ToolCallStatus.RUNNING])
    exchanges = Exchange.objects.all()
    if session is not None:  # the (session, status) index answers both halves
        dangling, exchanges = dangling.filter(session=session), exchanges.filter(session=session)
    broke_mid_call = Q(status=ExchangeStatus.BROKEN, pk__in=dangling.values("exchange_id"))
    return exchanges.filter(worker_died | broke_mid_call)


def _repair(exchange: Exchange) -> None:
    if exchange.status == ExchangeStatus.BROKEN:
        reason = f"the exchange broke mid-call ({exchange.error_code})"
    else:
        reason = f"claim {exchange.claim_token[:8]} held since {exchange.claimed_at:%Y-%m-%d %H:%M:%S} UTC"
    repair_dangling(build_env(exchange.session, exchange_id=exchange.pk), exchange, reason=reason)


def repair_stale_exchanges() -> list[int]:
    """Repair every exchange whose turn a dead worker left open (at most 100 a sweep), so a crashed
    run does not look like it is running forever. Returns the repaired exchanges' ids."""
    crashed = list(_stale_exchanges().select_related("session")[:100])
    for exchange in crashed:
        _repair(exchange)
    return [exchange.pk for exchange in crashed]


def repair_stale_exchange(*, session: Session) -> Exchange | None:
    """A message to a session whose last exchange was claimed by a worker that died (its claim is
    older than any task may run) first repairs that exchange's dangling calls (SPEC R3)."""
    # Only the session's latest exchange can be stale (admission keeps one active at a time), and
    # almost always it is settled: one indexed look at its status spares the full check.
    latest = Exchange.objects.filter(session=session).order_by("-number").values_list("status", flat=True).first()
    if latest not in (ExchangeStatus.OPEN, ExchangeStatus.BROKEN):
        return None
    crashed = _stale_exchanges(session).select_related("session").first()
    if crashed is not None:
        _repair(crashed)
    return crashed


def session_stop(*, user: AbstractBaseUser, session: Session) -> Exchange | None:
    """Stop the session's active exchange. A live driver (a worker, a resolver carrying out an
    answer) sees the stop within its poll interval and settles once its calls have; an exchange no
    live driver holds (parked, not yet picked up, or its worker died) is settled Canceled here, in
    one transaction with its waiting calls and their pending approvals."""
    job_cancel_for_session(session_id=session.pk, principal=f"user:{user.pk}")  # its async tasks too
    store = kernel_store()
    active = store.exchanges.active(session.pk)
    if active is None:
        return None
    principal = f"user:{user.pk}"
    store.exchanges.request_cancel(active.pk, principal=principal)
    with transaction.atomic():
        if store.exchanges.claim_for_recovery(active.pk, new_token(), principal=principal, reason="stop"):
            stop_unheld(store.exchanges.get(active.pk), principal=principal)
    return store.exchanges.get(active.pk)


def session_wake(*, session: Session) -> bool:
    """A viewer connected (or an async result arrived): if the session's active exchange has no
    live driver, schedule ``recover_turn`` so it continues without anyone sending a message.
    Returns whether it scheduled one."""
    store = kernel_store()
    active = store.exchanges.active(session.pk)
    if active is None or not store.exchanges.stranded(active.pk, unclaimed_for=settings.SKALD_LEASE_SECONDS):
        return False
    with transaction.atomic():
        work_on_commit("skald.tasks.recover_turn", session.pk, key=f"recover:e{active.pk}:{new_token()[:12]}")
    return True

