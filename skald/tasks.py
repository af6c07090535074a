"""django-q2 entry points. Each parses its arguments and delegates; no worker waits on a human."""

from __future__ import annotations

import logging

from approvals.services import approvals_expire
from loop.driver import drive_exchange
from loop.errors import ClaimRefused
from loop.models import Exchange, ExchangeStatus, ToolCall
from loop.recovery import resolve_pending
from skald.cases.runs import run_sync_from_exchange
from skald.core.ids import new_token
from skald.loop_adapters.runtime import build_env
from skald.sessions import services as session_services

logger = logging.getLogger(__name__)


def run_kernel_turn(exchange_id: int) -> str:
    """Drive an admitted exchange (a user message) to a settled or parked outcome."""
    exchange = Exchange.objects.select_related("session").get(pk=exchange_id)
    session_services.repair_stale_exchange(session=exchange.session)  # a dangling call from a crashed turn first
    if exchange.status != ExchangeStatus.OPEN or exchange.claim_token:
        logger.info("exchange %s is %s; nothing to drive", exchange_id, exchange.status)
        return exchange.status
    try:
        env = build_env(exchange.session, exchange_id=exchange.pk)
        result = drive_exchange(env, exchange, claim_token=new_token())
    except ClaimRefused:  # another worker drives it: no double driving
        return "claimed elsewhere"
    finally:
        after_exchange(exchange_id)
    return result.outcome.name


def after_exchange(exchange_id: int) -> None:
    """Product follow-ups of a settled or parked exchange (runs, proposals) hook in here."""
    try:
        run_sync_from_exchange(exchange_id)
    except Exception:  # the exchange's own outcome is already durable
        logger.exception("run sync after exchange %s failed", exchange_id)


def resolve_pending_call(tool_call_id: int, resolution: str, reason: str = "") -> str:
    """Continue after a human answered (or an approval expired): run or settle the call, then
    drive the exchange on when nothing else of it waits. Works the same after any restart."""
    call = ToolCall.objects.select_related("session", "frame").get(pk=tool_call_id)
    env = build_env(call.session, exchange_id=call.exchange_id)
    try:
        result = resolve_pending(env, call, resolution=resolution,  # type: ignore[arg-type]
                                 reason=reason, claim_token=new_token())
    finally:
        after_exchange(call.exchange_id)
    return result.outcome.name if result is not None else "settled call"


def expire_approvals() -> int:
    """Scheduled every minute: expire overdue approvals so no conversation wedges."""
    return approvals_expire()


def repair_stale_exchanges() -> int:
    """Scheduled every minute: repair turns whose worker died (typed interrupted results, R3)."""
    repaired = session_services.repair_stale_exchanges()
    for exchange_id in repaired:
        after_exchange(exchange_id)
    return len(repaired)
