"""Continuing after a human (SPEC R3 ``resolve_pending_call``) and repairing dangling calls.

A crash loses memory, never truth: a parked call is a row. Resolving it runs the call with the gate
skipped (the human just decided) but with the session's real tool context, records a typed
``rejected`` or ``expired`` result otherwise, and — once no call of the exchange is still waiting —
reopens the exchange and drives it on like any other.
"""

from __future__ import annotations

from typing import Literal

from loop.cancellation import CancelToken
from loop.driver import LoopEnv, drive_exchange
from loop.models import Exchange, ExchangeStatus, ToolCall, ToolCallStatus
from loop.outcomes import CancelCause, Canceled, ExchangeResult
from loop.store import parsed_from_row
from loop.tools.fanout import run_round

Resolution = Literal["approve", "reject", "expire", "answer", "close"]

_RESULTS = {
    "reject": (ToolCallStatus.REJECTED, "rejected by a human: {reason}"),
    "expire": (ToolCallStatus.EXPIRED, "expired: no human answered the approval in time"),
    "answer": (ToolCallStatus.COMPLETED, "A human answered: {reason}"),
}


def resolve_pending(
    env: LoopEnv, call: ToolCall, *, resolution: Resolution, reason: str, claim_token: str
) -> ExchangeResult | None:
    """Settle one parked call; drive the exchange on when it was the last one waiting.

    Returns the exchange result when this resolver drove (or closed) the exchange, None otherwise
    (another resolver holds the batch, or the call was already settled — rejected and canceled
    calls are terminal and never re-executed).
    """
    store = env.store
    narrative = call.frame.narrative
    if resolution == "approve":
        if not store.take_awaiting(call, to_status=ToolCallStatus.PLANNED, principal=env.principal):
            return None
        run_round(env.round_env(narrative), [(call, parsed_from_row(call))], CancelToken(),
                  skip_gate_for=frozenset({call.pk}))
    elif resolution == "close":
        if not store.take_awaiting(call, to_status=ToolCallStatus.RUNNING, principal=env.principal):
            return None
        store.cancel_calls([call], reason=f"closed by a human: {reason}".rstrip(": "), principal=env.principal,
                           narrative=narrative)
    else:
        status, template = _RESULTS[resolution]
        if not store.take_awaiting(call, to_status=ToolCallStatus.RUNNING, principal=env.principal):
            return None
        store.record_result(call, status=status, content=template.format(reason=reason).rstrip(": "),
                            is_error=resolution != "answer", truncated=False, principal=env.principal,
                            narrative=narrative)
    exchange = store.exchange(call.exchange_id)
    if store.awaiting_calls(exchange.pk) or exchange.status != ExchangeStatus.PARKED:
        return None
    if resolution == "close":
        closed = Canceled(reason=reason[:500], cause=CancelCause.CLOSED_BY_HUMAN)
        store.settle(exchange, closed, principal=env.principal)
        return ExchangeResult(exchange.pk, closed, exchange.receipt)
    if not store.reopen(exchange, principal=env.principal, reason=f"{resolution} {call.call_key}"):
        return None
    return drive_exchange(env, store.exchange(exchange.pk), claim_token=claim_token)


INTERRUPTED_RESULT = "interrupted: the worker driving this call stopped before it finished; it was not retried"


def repair_dangling(env: LoopEnv, exchange: Exchange, *, reason: str) -> int:
    """Make a crashed exchange's history well-formed before the session moves on (R3).

    Every call it left planned or running gets a typed ``interrupted`` result (visible to the
    model, audited — never a silent repair, never a blind re-run of an effect), and the exchange is
    marked broken with ``worker_lost``: its claim stays and its request key refuses a retry.
    Returns the number of calls repaired.
    """
    store = env.store
    dangling = store.calls_in(exchange.pk, ToolCallStatus.PLANNED, ToolCallStatus.RUNNING)
    for call in dangling:
        store.record_result(call, status=ToolCallStatus.INTERRUPTED, content=INTERRUPTED_RESULT, is_error=True,
                            truncated=False, principal=env.principal, narrative=call.frame.narrative)
    store.mark_broken(exchange, code="worker_lost", message=reason, principal=env.principal)
    return len(dangling)
