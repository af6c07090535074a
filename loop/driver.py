"""The driver (SPEC L1-L5): input → context → stream → tool-exec → loop, as a ``while True`` over a
typed step, ending in a typed outcome.

Admission (:func:`admit_exchange`) and driving (:func:`drive_exchange`) are separate so the web
process can admit a request idempotently and a worker can drive it; :func:`run_turns_keyed` does
both in one call (tests, benchmarks, in-process callers).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loop.bounds import Bounds
from loop.budgets import BudgetRefused, DispatchAuthority
from loop.cancellation import CancelToken
from loop.context import DEFAULT_CONTEXT, ContextBuilder
from loop.dispatch import DispatchCanceled, dispatch
from loop.errors import HarnessError, HookError, LoopError, ProviderError
from loop.hooks import HookContext, HookPoint, LoopHooks
from loop.masking import find_tripwires
from loop.models import Exchange, ExchangeStatus, Outcome, ToolCallStatus
from loop.outcomes import (
    AwaitingHuman,
    BudgetExceeded,
    Canceled,
    Completed,
    ExchangeResult,
    ProviderFailed,
    RunOutcome,
    TurnCapReached,
)
from loop.ports import AgentSpec, EventBus, Gate, ToolDiscovery, TurnScope
from loop.providers.base import LlmProvider, ProviderRequest
from loop.steps import FinalStep, ParkStep, Step, classify_turn
from loop.store import Store
from loop.tools.execute import ToolOutcome
from loop.tools.fanout import RoundEnv, journal_upfront, run_round
from loop.tools.registry import ToolRegistry

logger = logging.getLogger(__name__)


@dataclass
class LoopEnv:
    """Everything a driver needs, injected. Persisted state lives in the store, not here."""

    store: Store
    provider: LlmProvider
    tools: ToolRegistry
    gate: Gate
    agent: AgentSpec
    scope: TurnScope
    bus: EventBus
    bounds: Bounds = field(default_factory=Bounds)
    hooks: LoopHooks = field(default_factory=LoopHooks.pass_through)
    discovery: ToolDiscovery | None = None
    context: ContextBuilder = DEFAULT_CONTEXT
    cancel_poll_interval: float = 0.2
    narrative: str = ""

    @property
    def principal(self) -> str:
        return self.scope.principal


class InputRefused(HarnessError):
    code = "credential_tripwire"


def _hook(env: LoopEnv, point: HookPoint, exchange_id: int | None, detail: Mapping[str, Any]) -> None:
    verdict = env.hooks.run(
        point,
        HookContext(point=point, session_id=str(env.scope.session_id),
                    exchange_id=str(exchange_id) if exchange_id else None, agent=env.agent.name, detail=detail),
    )
    if not verdict.allowed:
        raise HookError(f"{point.value} denied: {verdict.reason}", code="hook_denied")


def admit_exchange(
    env: LoopEnv, *, request_key: str, content: str, author: str = "", claim_token: str = ""
) -> tuple[Exchange, bool]:
    """Idempotent admission (SPEC L4): ``loop.before_start`` policy, tripwires, then the stored row.

    Returns ``(exchange, replayed)``; a replayed exchange wrote nothing.
    """
    if env.hooks.configured(HookPoint.BEFORE_START):
        # An exact retry is answered before the policy runs: it admits nothing. Without a policy
        # the store's own admission answers it, in the same query that checks the session.
        existing = Exchange.objects.filter(session_id=env.scope.session_id, request_key=request_key).first()
        if existing is not None:
            return existing, True
    markers = find_tripwires(content)
    if markers:
        raise InputRefused(f"the message matches credential markers ({', '.join(markers)}); it was not stored")
    _hook(env, HookPoint.BEFORE_START, None, {"request_key": request_key})
    admission = env.store.admit(
        session_id=env.scope.session_id, request_key=request_key, content=content, principal=env.principal,
        config={"bounds": env.bounds.as_dict(), "agent": env.agent.name, "provider": env.provider.name,
                "budget_tokens": env.bounds.budget_tokens},
        author=author, claim_token=claim_token,
    )
    return admission.exchange, admission.replayed


class _CancelWatcher:
    """Polls the store for a stop request made in another process and fires the token."""

    def __init__(self, store: Store, exchange_id: int, token: CancelToken, interval: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(store, exchange_id, token, interval),
                                        name=f"cancel-watch:{exchange_id}", daemon=True)

    def _run(self, store: Store, exchange_id: int, token: CancelToken, interval: float) -> None:
        from django.db import connections

        try:
            while not self._stop.wait(interval) and not token.cancelled:
                if store.cancel_requested(exchange_id):
                    token.cancel("stop requested")
        finally:
            connections.close_all()

    def __enter__(self) -> _CancelWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)


def drive_exchange(
    env: LoopEnv, exchange: Exchange, *, claim_token: str, cancel: CancelToken | None = None
) -> ExchangeResult:
    """Claim and drive an open exchange to a settled or parked outcome."""
    if exchange.status == ExchangeStatus.SETTLED:
        return ExchangeResult(exchange.pk, _outcome_from_row(exchange), exchange.receipt, replayed=True)
    claimed_at_admission = exchange.claim_token == claim_token
    if not claimed_at_admission and not env.store.claim(exchange.pk, claim_token):
        raise HarnessError(f"exchange {exchange.pk} is not open or is claimed by another driver", code="claim_refused")
    exchange.claim_token = claim_token
    token = cancel or CancelToken()
    try:
        _hook(env, HookPoint.BEFORE_INPUT, exchange.pk, {"turns": exchange.turns})
        # A stop made while the exchange waited for a worker counts at once (the watcher polls
        # after that); one claimed with its admission a moment ago has had no time to be stopped.
        if not claimed_at_admission and env.store.cancel_requested(exchange.pk):
            token.cancel("stop requested")
        with _CancelWatcher(env.store, exchange.pk, token, env.cancel_poll_interval):
            outcome = _loop(env, exchange, token)
    except LoopError as exc:
        env.store.mark_broken(exchange, code=exc.code, message=str(exc), principal=env.principal)
        raise
    except Exception as exc:
        env.store.mark_broken(exchange, code="internal_error", message=repr(exc), principal=env.principal)
        raise
    return ExchangeResult(exchange.pk, outcome, exchange.receipt)


def _fresh_key() -> str:
    return secrets.token_hex(16)


def run_turns_keyed(
    env: LoopEnv, *, request_key: str, content: str, cancel: CancelToken | None = None, claim_token: str = "inline"  # noqa: S107 - a claim label, not a secret
) -> ExchangeResult:
    """Admit (idempotently) and drive one exchange. An exact retry returns the stored receipt."""
    # Driven in this process: the claim commits with the admission.
    exchange, replayed = admit_exchange(env, request_key=request_key, content=content, claim_token=claim_token)
    if replayed:
        return ExchangeResult(exchange.pk, _outcome_from_row(exchange), exchange.receipt, replayed=True)
    return drive_exchange(env, exchange, claim_token=claim_token, cancel=cancel)


def run_turns(
    env: LoopEnv, *, content: str, cancel: CancelToken | None = None, new_key: Callable[[], str] = _fresh_key
) -> ExchangeResult:
    """Convenience: always a new exchange, under a freshly minted request key."""
    return run_turns_keyed(env, request_key=new_key(), content=content, cancel=cancel)


def _outcome_from_row(exchange: Exchange) -> RunOutcome:
    detail = (exchange.receipt or {}).get("detail", {})
    match exchange.outcome:
        case Outcome.COMPLETED:
            return Completed(answer=detail.get("answer", ""))
        case Outcome.TURN_CAP_REACHED:
            return TurnCapReached(turns=exchange.turns)
        case Outcome.BUDGET_EXCEEDED:
            return BudgetExceeded(reason=detail.get("reason", ""))
        case Outcome.CANCELED:
            return Canceled(reason=detail.get("reason", ""))
        case Outcome.PROVIDER_FAILED:
            return ProviderFailed(code=detail.get("code", ""), message=detail.get("message", ""))
        case _:
            return AwaitingHuman()


def _settle(env: LoopEnv, exchange: Exchange, outcome: RunOutcome) -> RunOutcome:
    env.store.settle(exchange, outcome=outcome.name, principal=env.principal, detail=_detail(outcome))
    return outcome


def _detail(outcome: RunOutcome) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    if isinstance(outcome, Completed):
        detail = {"answer": outcome.answer[:2000]}
    elif isinstance(outcome, BudgetExceeded | Canceled):
        detail = {"reason": outcome.reason}
    elif isinstance(outcome, ProviderFailed):
        detail = {"code": outcome.code, "message": outcome.message[:300]}
    elif isinstance(outcome, TurnCapReached):
        detail = {"turns": outcome.turns}
    return detail


def _loop(env: LoopEnv, exchange: Exchange, token: CancelToken) -> RunOutcome:
    authority = DispatchAuthority(budget_tokens=exchange.budget_tokens, spent_tokens=exchange.reserved_tokens,
                                  accounting_incomplete=exchange.accounting_incomplete)
    frame = env.store.root_frame(exchange)
    round_env = RoundEnv(store=env.store, tools=env.tools, gate=env.gate, scope=env.scope, bounds=env.bounds,
                         principal=env.principal, narrative=env.narrative)
    specs = env.tools.specs()
    if env.discovery is not None:
        env.discovery.offered(specs)
    turn = exchange.turns
    while True:
        if token.cancelled:  # round boundary
            return _settle(env, exchange, Canceled(token.reason))
        if turn >= env.bounds.max_turns:
            return _settle(env, exchange, TurnCapReached(turn))
        if authority.exceeded:
            return _settle(env, exchange, BudgetExceeded("budget_spent"))
        turn += 1
        messages, messages_size = env.context.window(env.store, exchange.session_id, narrative=env.narrative,
                                                     cap=env.bounds.replay_cap)
        request = ProviderRequest(system=env.agent.system_prompt, messages=messages, tools=specs,
                                  metadata={"session": exchange.session_id, "exchange": exchange.number, "turn": turn})
        try:
            assembled = dispatch(env.provider, request, authority=authority, cancel=token,
                                 request_cap=env.bounds.request_cap, on_text=_live_text(env, exchange, turn),
                                 messages_size=messages_size)
        except BudgetRefused as exc:
            _persist_ledger(exchange, authority)
            return _settle(env, exchange, BudgetExceeded(exc.reason))
        except DispatchCanceled as exc:
            _persist_ledger(exchange, authority)
            return _settle(env, exchange, Canceled(str(exc) or "stop requested"))
        except ProviderError as exc:
            _persist_ledger(exchange, authority)
            return _settle(env, exchange, ProviderFailed(code=exc.code, message=str(exc)))
        step: Step = classify_turn(assembled, turn=turn, max_turns=env.bounds.max_turns)
        if isinstance(step, FinalStep) and not step.cap_reached:
            # The last turn: its message end and the settlement commit together.
            env.store.finish_turn(exchange=exchange, frame=frame, turn=turn, assembled=assembled,
                                  principal=env.principal, spent_tokens=authority.spent_tokens,
                                  outcome=step.outcome.name, detail=_detail(step.outcome))
            return step.outcome
        names = [c.name for c in assembled.tool_calls]
        journal = 0 if isinstance(step, FinalStep) else journal_upfront(env.tools, names)
        calls = env.store.record_message_end(exchange=exchange, frame=frame, turn=turn, assembled=assembled,
                                             principal=env.principal, spent_tokens=authority.spent_tokens,
                                             journal=journal)
        if isinstance(step, FinalStep):  # the turn cap: complete the group without running anything
            for call, _parsed in calls:
                env.store.record_result(call, status=ToolCallStatus.CANCELLED, is_error=True, truncated=False,
                                        content="not executed: the turn cap was reached",
                                        principal=env.principal, narrative=env.narrative)
            return _settle(env, exchange, step.outcome)
        result = run_round(round_env, calls, token)
        if result.canceled:
            return _settle(env, exchange, Canceled(token.reason or "stop requested"))
        if (result.parked or result.handoffs) and (token.cancelled or env.store.cancel_requested(exchange.pk)):
            # A stop that raced the park: nothing waits for a human; the waiting calls end cancelled.
            waiting = [call for call, _, _ in result.parked] + [call for call, _ in result.handoffs]
            for call in waiting:
                env.store.record_result(call, status=ToolCallStatus.CANCELLED, is_error=True, truncated=False,
                                        content="tool call cancelled: stop requested", principal=env.principal,
                                        narrative=env.narrative)
            return _settle(env, exchange, Canceled("stop requested"))
        if result.parked or result.handoffs:
            entries = [(call, _parker(env, request, verdict)) for call, request, verdict in result.parked]
            entries += [(call, _handoff(question)) for call, question in result.handoffs]
            question = "\n".join(question for _, question in result.handoffs)
            park = ParkStep(tuple(call.call_key for call, _ in entries))
            env.store.park(exchange, entries, principal=env.principal, question=question)
            return AwaitingHuman(call_keys=park.call_keys, question=question)


def _live_text(env: LoopEnv, exchange: Exchange, turn: int) -> Callable[[str], None]:
    def send(text: str) -> None:
        env.bus.delta(exchange.session_id, {"type": "turn.delta", "exchange": exchange.pk, "turn": turn, "text": text})

    return send


def _handoff(question: str) -> Callable[[], Mapping[str, Any]]:
    return lambda: {"handoff": True, "question": question}


def _parker(env: LoopEnv, request: Any, verdict: Any) -> Any:
    return lambda: env.gate.park(request, env.scope, verdict)


def _persist_ledger(exchange: Exchange, authority: DispatchAuthority) -> None:
    Exchange.objects.filter(pk=exchange.pk).update(
        reserved_tokens=authority.spent_tokens, accounting_incomplete=authority.accounting_incomplete
    )


__all__ = [
    "LoopEnv",
    "ToolOutcome",
    "admit_exchange",
    "drive_exchange",
    "run_turns",
    "run_turns_keyed",
]
