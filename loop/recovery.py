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

Frames (:mod:`loop.cascade`): reap an interrupted parallel batch (≥2 open sibling frames: fail
their spawning calls, close them), resolve every frame's calls as above deepest first, un-wedge a
finished child whose result never reached its parent, and cascade to the root, each frame driven
as its own agent. A call needing a human inside a child parks the whole tree the same way.
"""

from __future__ import annotations

from typing import Literal

from loop import tracing
from loop.cancellation import CancelToken
from loop.cascade import INTERRUPTED_RESULT, UNFINISHED, cascade, finish_calls, reap
from loop.driver import WAITING, FrameDrive, LoopEnv, drive_exchange, fenced, park_tree, trace_queue
from loop.errors import HarnessError, LeaseLost, LoopError
from loop.failpoints import failpoint
from loop.models import Exchange, ExchangeStatus, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, CancelCause, Canceled, ExchangeResult, RunOutcome, outcome_from_receipt
from loop.watch import StopWatcher

Resolution = Literal["approve", "reject", "expire", "answer", "close"]

_RESULTS = {
    "reject": (ToolCallStatus.REJECTED, "rejected by a human: {reason}"),
    "expire": (ToolCallStatus.EXPIRED, "expired: no human answered the approval in time"),
    "answer": (ToolCallStatus.COMPLETED, "A human answered: {reason}"),
}

__all__ = ["INTERRUPTED_RESULT", "ResolverBusy", "recover_exchange", "repair_dangling", "resolve_pending"]


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
    exchange = store.exchanges.get(call.exchange_id)
    if exchange.status != ExchangeStatus.PARKED:
        return None
    if not store.exchanges.claim_for_recovery(exchange.pk, claim_token, principal=env.principal):
        raise ResolverBusy(f"exchange {exchange.pk} is held by another driver")
    exchange.claim_token = claim_token
    env = fenced(env, exchange.pk, claim_token)
    taken = _answer(env, call, resolution=resolution, reason=reason)
    if not taken:
        store.exchanges.release(exchange.pk, claim_token)
        return None
    failpoint("approvals.after_take")
    return _continue_parked(env, exchange, claim_token=claim_token, close=reason if resolution == "close" else None)


def _answer(env: LoopEnv, call: ToolCall, *, resolution: Resolution, reason: str) -> bool:
    """Take the call out of awaiting_human exactly once and record what the human decided."""
    store, narrative = env.store, call.frame.narrative
    if resolution == "approve":
        return store.calls.take_awaiting(call, to_status=ToolCallStatus.APPROVED, principal=env.principal)
    if not store.calls.take_awaiting(call, to_status=ToolCallStatus.RUNNING, principal=env.principal):
        return False
    if resolution == "close":
        store.calls.cancel_calls([call], reason=f"closed by a human: {reason}".rstrip(": "), principal=env.principal,
                                 narrative=narrative)
        return True
    status, template = _RESULTS[resolution]
    store.calls.record_result(call, status=status, content=template.format(reason=reason).rstrip(": "),
                              is_error=resolution != "answer", truncated=False, principal=env.principal,
                              narrative=narrative)
    return True


def _continue_parked(
    env: LoopEnv, exchange: Exchange, *, claim_token: str, close: str | None = None
) -> ExchangeResult:
    """A claimed exchange (parked, or open with a lapsed lease): finish the frame tree's unfinished
    calls (:mod:`loop.cascade`), then close it, leave it parked (released) while a call still waits
    for a human, or cascade up the tree and drive the root on. Its spans continue the exchange's
    trace (the stored traceparent), whichever process this is."""
    if not tracing.enabled:
        return _continue(env, exchange, claim_token=claim_token, close=close)
    restore = tracing.tracer.resume(exchange.traceparent)
    try:
        return _continue(env, exchange, claim_token=claim_token, close=close)
    finally:
        restore()


def _continue(env: LoopEnv, exchange: Exchange, *, claim_token: str, close: str | None) -> ExchangeResult:
    env = fenced(env, exchange.pk, claim_token)
    store, token = env.store, CancelToken()
    exchange.claim_token = claim_token
    if store.exchanges.cancel_requested(exchange.pk):
        token.cancel("stop requested")
    try:
        with StopWatcher(store.exchanges, exchange.pk, token, env.cancel_poll_interval, claim=claim_token):
            ended = _finish_tree(env, exchange, token, claim_token=claim_token, close=close)
    except LeaseLost:
        raise  # another driver holds it now: nothing more is written here
    except LoopError as exc:
        store.exchanges.mark_broken(exchange, code=exc.code, message=str(exc), principal=env.principal)
        raise
    if ended is not None:
        return ExchangeResult(exchange.pk, ended, exchange.receipt)
    fresh = store.exchanges.get(exchange.pk)  # the children's spend is on the root's ledger now
    fresh.claim_token = claim_token
    return drive_exchange(env, fresh, claim_token=claim_token, cancel=token)


def _finish_tree(env: LoopEnv, exchange: Exchange, token: CancelToken, *, claim_token: str,
                 close: str | None) -> RunOutcome | None:
    """None when the root's loop goes on (the caller drives it)."""
    store = env.store
    reap(env, exchange)
    root = FrameDrive.start(env, exchange, token)
    state = finish_calls(env, exchange, root, token)
    if state.stopped is not None or token.cancelled or store.exchanges.cancel_requested(exchange.pk):
        return _stop(env, exchange, token.reason or "stop requested")
    if state.parked:  # re-gated calls that now need a human: the tree parks (again)
        return park_tree(env, exchange, state.parked)
    if store.calls.awaiting_calls(exchange.pk):  # re-asked: the cards are still there
        store.exchanges.release(exchange.pk, claim_token)
        return AwaitingHuman()
    if close is not None:
        store.frames.cancel_open(exchange, reason=f"closed by a human: {close}"[:500], principal=env.principal,
                                 then=env.calls_canceled)
        closed = Canceled(reason=close[:500], cause=CancelCause.CLOSED_BY_HUMAN)
        store.exchanges.settle(exchange, closed, principal=env.principal)
        return closed
    if exchange.status == ExchangeStatus.PARKED:
        if not store.exchanges.reopen(exchange, principal=env.principal, reason="answered", token=claim_token):
            raise HarnessError(f"exchange {exchange.pk} could not be reopened", code="claim_refused")
        exchange.status = ExchangeStatus.OPEN
    ended = cascade(env, exchange, root, token)
    if isinstance(ended, Canceled):
        return _stop(env, exchange, ended.reason)
    return ended


def _stop(env: LoopEnv, exchange: Exchange, reason: str) -> RunOutcome:
    """A stop ends the tree: open frames close canceled, what still waits ends canceled with its
    pending approval, then the exchange settles — so its receipt covers every event."""
    store = env.store
    if exchange.status == ExchangeStatus.SETTLED:  # the root's round settled it already
        return outcome_from_receipt(exchange.outcome, exchange.receipt)
    store.frames.cancel_open(exchange, reason=reason, principal=env.principal, then=env.calls_canceled)
    store.calls.cancel_calls(store.calls.calls_in(exchange.pk, *WAITING, ToolCallStatus.RUNNING), reason=reason,
                             principal=env.principal, then=env.calls_canceled)
    stopped = Canceled(reason)
    store.exchanges.settle(exchange, stopped, principal=env.principal)
    return stopped


def recover_exchange(env: LoopEnv, exchange_id: int, *, claim_token: str,
                     read: Exchange | None = None) -> ExchangeResult | None:
    """Continue an exchange no live driver holds (SPEC R1, R2): a lapsed lease, a lost task, a
    parked exchange whose answers were never carried out. No new message: the history is made
    well-formed (over the whole frame tree) and a normal loop runs on it. None when a live driver
    holds it (nothing to do).

    An exchange no driver ever claimed (its task's first delivery, or a task that was lost before
    it ran) has nothing to recover: it is driven as the worker that admitted it would. ``read``: the
    row as the caller read it before the claim, which spares reading it again.
    """
    store = env.store
    if store.exchanges.claim_first(exchange_id, claim_token):
        exchange = read if read is not None and read.pk == exchange_id and read.claimed_at is None \
            else store.exchanges.get(exchange_id)
        exchange.claim_token = claim_token
        return drive_exchange(env, exchange, claim_token=claim_token, queued=True)
    if not store.exchanges.claim_for_recovery(exchange_id, claim_token, principal=env.principal):
        return None
    exchange = store.exchanges.get(exchange_id)
    if tracing.enabled:
        trace_queue(exchange)
    return _continue_parked(env, exchange, claim_token=claim_token)


def repair_dangling(env: LoopEnv, exchange: Exchange, *, reason: str) -> int:
    """Close a long-dead exchange for good before the session moves on (R3, a user message).

    Every call it left unfinished gets a typed ``interrupted`` result (visible to the model,
    audited — never a silent repair, never a blind re-run of an effect), and the exchange is
    marked broken with ``worker_lost`` (one an infrastructure failure broke keeps its own code): its
    claim stays and its request key refuses a retry.
    Returns the number of calls repaired.
    """
    store = env.store
    dangling = store.calls.calls_in(exchange.pk, *UNFINISHED)
    for call in dangling:
        store.calls.record_result(call, status=ToolCallStatus.INTERRUPTED, content=INTERRUPTED_RESULT, is_error=True,
                                  truncated=False, principal=env.principal, narrative=call.frame.narrative)
    if exchange.status != ExchangeStatus.BROKEN:  # a recorded break keeps its own code
        store.exchanges.mark_broken(exchange, code="worker_lost", message=reason, principal=env.principal)
    return len(dangling)
