"""Restart recovery (SPEC R1-R3): a crash loses memory, never truth.

Every state transition is a store write, so recovery has no mode of its own: it claims the
exchange exactly like a live turn (a lease, so two drivers never drive it together), makes the
history well-formed, and runs a normal loop on it.

* A call that was ``running`` when its worker died is re-gated and re-run — unless its tool
  declares ``RestartHint.MARK_INTERRUPTED`` (``execute_cmd``: the effect may have happened), which
  gets a typed ``interrupted`` result instead. A ``planned`` call was never started: it runs its
  round normally. An ``approved`` call runs with the gate skipped (a human decided it).
* An ``awaiting_human`` call is re-asked: its approval row (the card, same request id) is still
  there, so the exchange stays parked until a human answers.
* ``canceled`` and ``rejected`` are terminal and never re-executed.

Frames: today every exchange drives its root frame. Child frames (delegation) slot in here: reap
an interrupted parallel batch (≥2 open frames at one depth: fail their spawning calls, close them),
resolve the deepest frame's calls as above, un-wedge a finished child whose result never reached its
parent, and cascade to the root, each frame driven as its own agent.
"""

from __future__ import annotations

from typing import Literal

from loop.cancellation import CancelToken
from loop.driver import WAITING, LoopEnv, drive_exchange, finish_round
from loop.errors import HarnessError
from loop.failpoints import failpoint
from loop.models import Exchange, ExchangeStatus, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, CancelCause, Canceled, ExchangeResult
from loop.tools.hints import RestartHint

Resolution = Literal["approve", "reject", "expire", "answer", "close"]

_RESULTS = {
    "reject": (ToolCallStatus.REJECTED, "rejected by a human: {reason}"),
    "expire": (ToolCallStatus.EXPIRED, "expired: no human answered the approval in time"),
    "answer": (ToolCallStatus.COMPLETED, "A human answered: {reason}"),
}

INTERRUPTED_RESULT = "interrupted: the worker driving this call stopped before it finished; it was not retried"
UNFINISHED = (ToolCallStatus.PLANNED, ToolCallStatus.RUNNING, ToolCallStatus.APPROVED)


class ResolverBusy(HarnessError):
    """Another driver holds the parked exchange (another answer of its batch is being carried out):
    the answer stays pending and is carried out once that driver lets go."""

    code = "resolver_busy"


def resolve_pending(
    env: LoopEnv, call: ToolCall, *, resolution: Resolution, reason: str, claim_token: str
) -> ExchangeResult | None:
    """Carry out a human's answer to one parked call; drive the exchange on when nothing else of
    it waits (SPEC R3 ``resolve_pending_call``). Runs the same after any restart, in any process.

    The resolver claims the parked exchange like a driver (a lease), so a stop reaches the call it
    runs and a crash anywhere after the answer is taken leaves an exchange recovery can finish.

    Returns the exchange result when this resolver settled, parked or drove it; None when the call
    was already answered (or the exchange is no longer parked).

    Raises:
        ResolverBusy: another driver holds the exchange right now (retry later).
    """
    store = env.store
    exchange = store.exchange(call.exchange_id)
    if exchange.status != ExchangeStatus.PARKED:
        return None
    if not store.claim_for_recovery(exchange.pk, claim_token, principal=env.principal):
        raise ResolverBusy(f"exchange {exchange.pk} is held by another driver")
    exchange.claim_token = claim_token
    taken = _answer(env, call, resolution=resolution, reason=reason)
    if not taken:
        store.release(exchange.pk, claim_token)
        return None
    failpoint("approvals.after_take")
    return _continue_parked(env, exchange, claim_token=claim_token, close=reason if resolution == "close" else None)


def _answer(env: LoopEnv, call: ToolCall, *, resolution: Resolution, reason: str) -> bool:
    """Take the call out of awaiting_human exactly once and record what the human decided."""
    store, narrative = env.store, call.frame.narrative
    if resolution == "approve":
        return store.take_awaiting(call, to_status=ToolCallStatus.APPROVED, principal=env.principal)
    if not store.take_awaiting(call, to_status=ToolCallStatus.RUNNING, principal=env.principal):
        return False
    if resolution == "close":
        store.cancel_calls([call], reason=f"closed by a human: {reason}".rstrip(": "), principal=env.principal,
                           narrative=narrative)
        return True
    status, template = _RESULTS[resolution]
    store.record_result(call, status=status, content=template.format(reason=reason).rstrip(": "),
                        is_error=resolution != "answer", truncated=False, principal=env.principal,
                        narrative=narrative)
    return True


def _continue_parked(
    env: LoopEnv, exchange: Exchange, *, claim_token: str, close: str | None = None
) -> ExchangeResult:
    """A claimed parked exchange: finish its unfinished calls, then close it, drive it on, or leave
    it parked (released) while a call still waits for a human."""
    store, token = env.store, CancelToken()
    unfinished = _well_formed(env, exchange)
    approved = frozenset(call.pk for call in unfinished if call.status == ToolCallStatus.APPROVED)
    if unfinished:
        ended = finish_round(env, exchange, unfinished, claim_token=claim_token, approved=approved, cancel=token)
        if ended is not None:
            return ExchangeResult(exchange.pk, ended, exchange.receipt)
    if token.cancelled or store.cancel_requested(exchange.pk):  # a stop: what still waits ends with it
        reason = token.reason or "stop requested"
        store.cancel_calls(store.calls_in(exchange.pk, *WAITING), reason=reason, principal=env.principal,
                           then=env.calls_canceled)
        stopped = Canceled(reason)
        store.settle(exchange, stopped, principal=env.principal)
        return ExchangeResult(exchange.pk, stopped, exchange.receipt)
    if store.awaiting_calls(exchange.pk):  # re-asked: the cards are still there
        store.release(exchange.pk, claim_token)
        return ExchangeResult(exchange.pk, AwaitingHuman())
    if close is not None:
        closed = Canceled(reason=close[:500], cause=CancelCause.CLOSED_BY_HUMAN)
        store.settle(exchange, closed, principal=env.principal)
        return ExchangeResult(exchange.pk, closed, exchange.receipt)
    if not store.reopen(exchange, principal=env.principal, reason="answered", token=claim_token):
        raise HarnessError(f"exchange {exchange.pk} could not be reopened", code="claim_refused")
    return drive_exchange(env, store.exchange(exchange.pk), claim_token=claim_token, cancel=token)


def _well_formed(env: LoopEnv, exchange: Exchange) -> list[ToolCall]:
    """Give every call that was running when its worker died and may not run twice its typed
    ``interrupted`` result; return the calls that still have to run, in call order."""
    unfinished = []
    for call in env.store.calls_in(exchange.pk, *UNFINISHED):
        tool = env.tools.get(call.tool)
        if call.status == ToolCallStatus.RUNNING and tool is not None \
                and tool.restart_hint == RestartHint.MARK_INTERRUPTED:
            env.store.record_result(call, status=ToolCallStatus.INTERRUPTED, content=INTERRUPTED_RESULT,
                                    is_error=True, truncated=False, principal=env.principal,
                                    narrative=call.frame.narrative)
        else:
            unfinished.append(call)
    return unfinished


def recover_exchange(env: LoopEnv, exchange_id: int, *, claim_token: str) -> ExchangeResult | None:
    """Continue an exchange no live driver holds (SPEC R1, R2): a lapsed lease, a lost task, a
    parked exchange whose answers were never carried out. No new message: the history is made
    well-formed and a normal loop runs on it. None when a live driver holds it (nothing to do).
    """
    store = env.store
    if not store.claim_for_recovery(exchange_id, claim_token, principal=env.principal):
        return None
    exchange = store.exchange(exchange_id)
    if exchange.status == ExchangeStatus.PARKED:
        return _continue_parked(env, exchange, claim_token=claim_token)
    unfinished = _well_formed(env, exchange)
    approved = frozenset(call.pk for call in unfinished if call.status == ToolCallStatus.APPROVED)
    cancel = CancelToken()
    if store.cancel_requested(exchange.pk):
        cancel.cancel("stop requested")
    return drive_exchange(env, exchange, claim_token=claim_token, cancel=cancel, resume=unfinished,
                          approved=approved)


def repair_dangling(env: LoopEnv, exchange: Exchange, *, reason: str) -> int:
    """Close a long-dead exchange for good before the session moves on (R3, a user message).

    Every call it left unfinished gets a typed ``interrupted`` result (visible to the model,
    audited — never a silent repair, never a blind re-run of an effect), and the exchange is
    marked broken with ``worker_lost`` (one an infrastructure failure broke keeps its own code): its
    claim stays and its request key refuses a retry.
    Returns the number of calls repaired.
    """
    store = env.store
    dangling = store.calls_in(exchange.pk, *UNFINISHED)
    for call in dangling:
        store.record_result(call, status=ToolCallStatus.INTERRUPTED, content=INTERRUPTED_RESULT, is_error=True,
                            truncated=False, principal=env.principal, narrative=call.frame.narrative)
    if exchange.status != ExchangeStatus.BROKEN:  # a recorded break keeps its own code
        store.mark_broken(exchange, code="worker_lost", message=reason, principal=env.principal)
    return len(dangling)
