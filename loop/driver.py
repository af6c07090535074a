"""The driver (SPEC L1-L5): input → context → stream → tool-exec → loop, as a ``while True`` over a
typed step, ending in a typed outcome.

Admission (:func:`admit_exchange`) and driving (:func:`drive_exchange`) are separate so the web
process can admit a request idempotently and a worker can drive it; :func:`run_turns_keyed` does
both in one call (tests, benchmarks, in-process callers).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from loop import tracing
from loop.admission import InputRefused, admit_exchange, run_hook
from loop.budgets import BudgetRefused, DispatchAuthority
from loop.cancellation import CancelToken
from loop.compaction.cycle import QUOTA_REASON, EpisodeState, cycle_env, quota_row, run_cycle
from loop.dispatch import DispatchCanceled, dispatch
from loop.env import LoopEnv
from loop.errors import ClaimRefused, InfrastructureError, LeaseLost, LoopError, ProviderError
from loop.failpoints import failpoint
from loop.frame_link import FrameLink
from loop.hooks import HookPoint
from loop.masking import withhold_credentials
from loop.models import TERMINAL_TOOL_CALL_STATUSES, Exchange, ExchangeStatus, Frame, ToolCall, ToolCallStatus
from loop.outcomes import (
    AwaitingHuman,
    BudgetExceeded,
    Canceled,
    ExchangeResult,
    ProviderFailed,
    RunOutcome,
    TerminalOutcome,
    outcome_from_receipt,
)
from loop.parking import ParkEntry, Parker
from loop.ports import GateCall, GateVerdict
from loop.providers.base import AssembledTurn, ProviderRequest, ToolSpec
from loop.steps import Answer, CapReached, RoundEnd, RunAgain, ToolRound, classify_turn
from loop.store import Ledger, ParsedCall, parsed_from_row
from loop.tools.execute import ToolOutcome
from loop.tools.fanout import RoundEnv, RoundResult, journal_upfront, run_round
from loop.tools.infra import is_infrastructure_error
from loop.watch import StopWatcher

# ``LoopEnv`` is imported from here by callers: it is the driver's argument.

logger = logging.getLogger(__name__)

# A call in one of these states has no result yet and no worker running it.
WAITING = (ToolCallStatus.PLANNED, ToolCallStatus.APPROVED, ToolCallStatus.AWAITING_HUMAN)


def drive_exchange(
    env: LoopEnv,
    exchange: Exchange,
    *,
    claim_token: str,
    cancel: CancelToken | None = None,
    resume: Sequence[ToolCall] = (),
    approved: frozenset[int] = frozenset(),
    queued: bool = False,
) -> ExchangeResult:
    """Claim and drive an open exchange to a settled or parked outcome.

    ``resume`` are calls a crash or a human left unfinished (recovery): their round completes
    first, re-gated except the ``approved`` ones (a human just decided those). ``queued``: the
    caller claimed it with ``claim_token`` after it waited for a worker (not at its admission).

    Raises:
        ClaimRefused: the exchange is not open or another driver holds it.
        LoopError: an infrastructure breach; the exchange is marked broken first.
    """
    if not tracing.enabled:
        return _drive(env, exchange, claim_token=claim_token, cancel=cancel, resume=resume, approved=approved,
                      queued=queued)
    restore = tracing.tracer.resume(exchange.traceparent)  # the admission's trace, in any process
    try:
        return _drive(env, exchange, claim_token=claim_token, cancel=cancel, resume=resume, approved=approved,
                      queued=queued)
    finally:
        restore()


def _drive(env: LoopEnv, exchange: Exchange, *, claim_token: str, cancel: CancelToken | None,
           resume: Sequence[ToolCall], approved: frozenset[int], queued: bool = False) -> ExchangeResult:
    if exchange.status == ExchangeStatus.SETTLED:
        return _replayed(exchange)
    claimed_at_admission = exchange.claim_token == claim_token and not queued
    if exchange.claim_token != claim_token and not env.store.exchanges.claim(exchange.pk, claim_token):
        raise ClaimRefused(f"exchange {exchange.pk} is not open or is claimed by another driver")
    exchange.claim_token = claim_token
    if tracing.enabled and not claimed_at_admission:
        trace_queue(exchange)
    failpoint("loop.after_claim")
    env = fenced(env, exchange.pk, claim_token)
    token = cancel or CancelToken()
    try:
        run_hook(env, HookPoint.BEFORE_INPUT, exchange.pk, {"turns": exchange.turns})
        # A stop made while the exchange waited for a worker counts at once (the watcher polls
        # after that); one claimed with its admission a moment ago has had no time to be stopped.
        if not claimed_at_admission and env.store.exchanges.cancel_requested(exchange.pk):
            token.cancel("stop requested")
        with StopWatcher(env.store.exchanges, exchange.pk, token, env.cancel_poll_interval, claim=claim_token):
            outcome = _loop(FrameDrive.start(env, exchange, token, approved), resume)
    except LeaseLost:
        raise  # the exchange is another driver's now: record nothing, not even a break
    except LoopError as exc:
        _mark_broken(env, exchange, code=exc.code, message=str(exc))
        raise
    except Exception as exc:
        if is_infrastructure_error(exc):  # a store write met a database failure: typed, not internal
            _mark_broken(env, exchange, code="store_infrastructure_error", message=repr(exc))
            raise InfrastructureError(f"store write failed: {type(exc).__name__}",
                                      code="store_infrastructure_error") from exc
        _mark_broken(env, exchange, code="internal_error", message=repr(exc))
        raise
    return ExchangeResult(exchange.pk, outcome, exchange.receipt)


def trace_queue(exchange: Exchange) -> None:
    """``skald.queue``: the wait from admission until a driver claimed an exchange that has had no
    model turn yet (a worker's claim, or a recovery's after the first claimer died)."""
    if exchange.turns == 0:
        tracing.tracer.start("skald.queue", {"skald.exchange.id": exchange.pk, "skald.session.id": exchange.session_id},
                             parent=exchange.traceparent or None, start_time=exchange.created_at).end()


def fenced(env: LoopEnv, exchange_id: int, claim_token: str) -> LoopEnv:
    """The driver's environment: its store refuses every write to the exchange once the claim is
    no longer ``claim_token`` (a lapsed lease that recovery took over, SPEC R2)."""
    if env.store.journal.fence == (exchange_id, claim_token):
        return env
    return replace(env, store=env.store.fenced(exchange_id, claim_token))


def _mark_broken(env: LoopEnv, exchange: Exchange, *, code: str, message: str) -> None:
    """Record the break; when the database itself is down, the claim stays and the stale-claim
    sweep repairs the exchange later (SPEC R2) — the original error is what the caller sees."""
    try:
        env.store.exchanges.mark_broken(exchange, code=code, message=message, principal=env.principal)
    except Exception as exc:
        if not is_infrastructure_error(exc):
            raise
        logger.error("exchange %s: could not record %s (%r); the stale-claim sweep repairs it", exchange.pk, code, exc)


def run_turns_keyed(
    env: LoopEnv, *, request_key: str, content: str, cancel: CancelToken | None = None, claim_token: str = "inline"  # noqa: S107 - a claim label, not a secret
) -> ExchangeResult:
    """Admit (idempotently) and drive one exchange. An exact retry returns the stored receipt."""
    # Driven in this process: the claim commits with the admission.
    exchange, replayed = admit_exchange(env, request_key=request_key, content=content, claim_token=claim_token)
    if replayed:
        return _replayed(exchange)
    return drive_exchange(env, exchange, claim_token=claim_token, cancel=cancel)


def _fresh_key() -> str:
    return secrets.token_hex(16)


def run_turns(
    env: LoopEnv, *, content: str, cancel: CancelToken | None = None, new_key: Callable[[], str] = _fresh_key
) -> ExchangeResult:
    """Convenience: always a new exchange, under a freshly minted request key."""
    return run_turns_keyed(env, request_key=new_key(), content=content, cancel=cancel)


def _replayed(exchange: Exchange) -> ExchangeResult:
    outcome = outcome_from_receipt(exchange.outcome, exchange.receipt, turns=exchange.turns)
    return ExchangeResult(exchange.pk, outcome, exchange.receipt, replayed=True)


# --- the loop -----------------------------------------------------------------------------------


def _loop(drive: FrameDrive, resume: Sequence[ToolCall] = ()) -> RunOutcome:
    if not tracing.enabled:
        return _turns(drive, resume)
    agent, frame = drive.env.agent, drive.frame
    span = tracing.tracer.start(f"invoke_agent {agent.name}", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent.name,
        "gen_ai.conversation.id": str(drive.exchange.session_id), "gen_ai.provider.name": drive.env.provider.name,
        "skald.exchange.id": drive.exchange.pk, "skald.frame.depth": frame.depth})
    with tracing.active(span):
        outcome = _turns(drive, resume)
        span.set({"skald.outcome": outcome.name})
    return outcome


def _turns(drive: FrameDrive, resume: Sequence[ToolCall]) -> RunOutcome:
    if resume:  # what a crash or a human left unfinished completes its round first
        ended = tool_round(drive, [(call, parsed_from_row(call)) for call in resume])
        if not isinstance(ended, RunAgain):
            return ended
    turn = drive.first_turn()
    while True:
        if drive.token.cancelled:  # round boundary
            return drive.settle(Canceled(drive.token.reason))
        if drive.authority.exceeded:
            return drive.settle(BudgetExceeded("budget_spent"))
        turn += 1
        reply = drive.model_turn(turn)
        if not isinstance(reply, AssembledTurn):  # refused, stopped or failed at the dispatch seam
            return drive.settle(reply)
        match classify_turn(reply, turn=turn, max_turns=drive.env.bounds.max_turns):
            case Answer(outcome):  # its message end and the settlement commit together
                drive.finish(turn, reply, outcome)
                return outcome
            case CapReached(outcome):  # close the group without running anything
                planned = drive.message_end(turn, reply, journal=0)
                drive.cancel([call for call, _ in planned], "not executed, the turn cap was reached")
                return drive.settle(outcome)
            case ToolRound():
                journal = journal_upfront(drive.env.tools, [c.name for c in reply.tool_calls])
                ended = tool_round(drive, drive.message_end(turn, reply, journal=journal))
                if not isinstance(ended, RunAgain):
                    return ended


def tool_round(drive: FrameDrive, calls: Sequence[tuple[ToolCall, ParsedCall]]) -> RoundEnd:
    """Run one round of a frame's calls (the effects) and say what follows.

    Returns:
        ``RunAgain`` when nothing waits (the loop takes its next model turn); ``AwaitingHuman``
        when calls wait for a human (parked, or kept on a deferred drive for one park of the
        tree); ``Canceled`` when a stop ended the frame (the drive settled or closed it).
    """
    env, token = drive.env, drive.token
    result = run_round(drive.round_env(), calls, token, skip_gate_for=drive.approved)
    waiting = [call for call, _, _ in result.parked] + [call for call, _ in result.handoffs]
    if result.canceled:
        stopped = Canceled(token.reason or "stop requested")
        drive.stop_tree(waiting, stopped.reason)
        drive.settle(stopped)
        return stopped
    if not waiting and not result.nested:
        return RunAgain()
    if token.cancelled or env.store.exchanges.cancel_requested(drive.exchange.pk):
        # A stop that raced the park: nothing waits for a human; the waiting calls end cancelled,
        # and so does every child that parked below this frame.
        stopped = Canceled("stop requested")
        drive.stop_tree(waiting, stopped.reason)
        drive.settle(stopped)
        return stopped
    return drive.park(result)


def park_entries(env: LoopEnv, result: RoundResult) -> list[ParkEntry]:
    """The round's waiting calls with their park callbacks: the gate's, the handoffs', and those a
    child frame parked below (the whole tree waits; SPEC S1, A3)."""
    entries = [ParkEntry(call, _parker(env, request, verdict), "") for call, request, verdict in result.parked]
    entries += [ParkEntry(call, _handoff(question), question) for call, question in result.handoffs]
    entries += result.nested
    return entries


def park_tree(env: LoopEnv, exchange: Exchange, entries: Sequence[ParkEntry]) -> AwaitingHuman:
    """Park every waiting call of the tree in one transaction: the exchange ends AwaitingHuman."""
    question = "\n".join(entry.question for entry in entries if entry.question)
    env.store.exchanges.park(exchange, [(entry.call, entry.park) for entry in entries], principal=env.principal,
                             question=question)
    return AwaitingHuman(call_keys=tuple(entry.call.call_key for entry in entries), question=question)


def run_frame(drive: FrameDrive) -> RunOutcome:
    """The loop over one frame: the root's (which settles the exchange) or a delegate's
    (:mod:`loop.delegation`, whose drive closes its frame instead)."""
    return _loop(drive)


@dataclass
class FrameDrive:
    """One frame being driven: its rows, the tree's dispatch authority and its token.

    This one drives the root frame and settles the exchange; :class:`loop.delegation.ChildDrive`
    drives a delegate's frame and closes it instead. Recovery (:mod:`loop.cascade`) drives stored
    frames with the same two.
    """

    env: LoopEnv
    exchange: Exchange
    frame: Frame
    authority: DispatchAuthority
    token: CancelToken
    specs: tuple[ToolSpec, ...]
    system: str  # the agent's system prompt, screened once per drive (configuration, not narrative)
    approved: frozenset[int] = frozenset()
    episode: EpisodeState = field(default_factory=EpisodeState)
    steps: int = 0  # model turns this frame has had in this exchange (a child's frame starts fresh)
    defer_park: bool = False  # keep waiting calls in ``parked`` instead of parking the exchange
    parked: list[ParkEntry] = field(default_factory=list)

    @classmethod
    def start(cls, env: LoopEnv, exchange: Exchange, token: CancelToken, approved: frozenset[int] = frozenset()
              ) -> FrameDrive:
        authority = DispatchAuthority(budget_tokens=exchange.budget_tokens, spent_tokens=exchange.reserved_tokens,
                                      accounting_incomplete=exchange.accounting_incomplete,
                                      returned_tokens=exchange.returned_tokens,
                                      returns=partial(env.store.exchanges.returned, exchange.pk))
        specs = env.tools.specs()
        if env.discovery is not None:
            env.discovery.offered(specs)
        system = withhold_credentials(env.agent.system_prompt, what="system prompt", detector=env.detector)
        frame = env.store.exchanges.root_frame(exchange)
        steps = env.store.frames.turns(exchange.pk, narrative=frame.narrative) if exchange.turns else 0
        return cls(env, exchange, frame, authority, token, specs, system, approved, steps=steps)

    def first_turn(self) -> int:
        """The turns this frame has had already (a resumed exchange goes on counting)."""
        return self.exchange.turns

    def round_env(self) -> RoundEnv:
        """The round's environment, with this frame as the link a delegate opens its child from."""
        link = FrameLink(env=self.env, exchange=self.exchange, frame=self.frame, authority=self.authority,
                         token=self.token)
        return replace(self.env.round_env(self.frame.narrative), link=link)

    def park(self, result: RoundResult) -> AwaitingHuman:
        """Park the waiting calls durably: the exchange ends AwaitingHuman and no worker waits.
        A deferred drive (recovery finishing several frames) keeps them for one park of the tree."""
        entries = park_entries(self.env, result)
        if self.defer_park:
            self.parked.extend(entries)
            return AwaitingHuman(call_keys=tuple(entry.call.call_key for entry in entries))
        return park_tree(self.env, self.exchange, entries)

    def model_turn(self, turn: int) -> AssembledTurn | TerminalOutcome:
        """Compaction at the idle boundary, context, then one provider call through the dispatch
        seam: the turn, or why there is none."""
        env, exchange = self.env, self.exchange
        try:
            cycle = run_cycle(cycle_env(env), exchange, self.episode, authority=self.authority, cancel=self.token)
            if cycle.status == "quota_exhausted":
                return BudgetExceeded(QUOTA_REASON)
            if cycle.view is not None:
                messages, size = cycle.view.messages, cycle.view.size
            else:  # a compaction was just committed: the window restarts at it
                messages, size = env.context.window(env.store, exchange.session_id, narrative=env.narrative,
                                                    cap=env.bounds.replay_cap, guard=env.detector)
            # ``turn`` numbers the exchange's turns (every frame's, resumed ones go on counting);
            # ``step`` is this frame's own: where its agent is even when a compaction summarised
            # the start of its exchange.
            request = ProviderRequest(system=self.system, messages=messages, tools=self.specs,
                                      metadata={"session": exchange.session_id, "exchange": exchange.number,
                                                "turn": turn, "step": self.steps + 1,
                                                "narrative": self.frame.narrative})
            if tracing.enabled:
                reply = self._traced_dispatch(request, turn, size)
            else:
                reply = dispatch(env.provider, request, authority=self.authority, cancel=self.token,
                                 request_cap=env.bounds.request_cap, on_text=self._live_text(turn),
                                 messages_size=size)
            self.steps += 1
            return reply
        except BudgetRefused as exc:
            return BudgetExceeded(exc.reason)
        except DispatchCanceled as exc:
            return Canceled(str(exc) or "stop requested")
        except ProviderError as exc:
            return ProviderFailed(code=exc.code, message=str(exc))

    def _traced_dispatch(self, request: ProviderRequest, turn: int, size: int) -> AssembledTurn:
        """The dispatch inside a ``chat {model}`` span (GenAI semconv)."""
        env = self.env
        model = model_name(env.provider)
        span = tracing.tracer.start(f"chat {model}", {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": env.provider.name,
            "gen_ai.request.model": model, "skald.turn": turn})
        with tracing.active(span):
            if span.capturing:  # the texts are built only to be recorded
                span.content("gen_ai.system_instructions", request.system)
                span.content("gen_ai.input.messages", messages_text(request))
            reply = dispatch(env.provider, request, authority=self.authority, cancel=self.token,
                             request_cap=env.bounds.request_cap, on_text=self._live_text(turn), messages_size=size)
            span.set(chat_attributes(model, reply))
            if span.capturing:
                span.content("gen_ai.output.messages", reply_text(reply))
        return reply

    def message_end(self, turn: int, reply: AssembledTurn, *, journal: int) -> list[tuple[ToolCall, ParsedCall]]:
        failpoint("loop.before_message_end")
        calls = self.env.store.exchanges.record_message_end(
            exchange=self.exchange, frame=self.frame, turn=turn, assembled=reply, principal=self.env.principal,
            spent_tokens=self.authority.spent_tokens, journal=journal,
        )
        failpoint("loop.after_message_end")
        return calls

    def finish(self, turn: int, reply: AssembledTurn, outcome: TerminalOutcome) -> None:
        failpoint("loop.before_settle")
        self.env.store.exchanges.finish_turn(exchange=self.exchange, frame=self.frame, turn=turn, assembled=reply,
                                             principal=self.env.principal, spent_tokens=self.authority.spent_tokens,
                                             outcome=outcome)
        failpoint("loop.after_settle")

    def cancel(self, calls: Sequence[ToolCall], reason: str) -> None:
        self.env.store.calls.cancel_calls(calls, reason=reason, principal=self.env.principal,
                                          narrative=self.frame.narrative, then=self.env.calls_canceled)

    def cancel_leftovers(self, reason: str) -> None:
        """Before a stop settles: calls of a parked batch that still wait end canceled too, so the
        receipt covers every call of the exchange."""
        store = self.env.store
        store.calls.cancel_calls(store.calls.calls_in(self.exchange.pk, *WAITING), reason=reason,
                                 principal=self.env.principal, then=self.env.calls_canceled)

    def stop_tree(self, waiting: Sequence[ToolCall], reason: str) -> None:
        """A stop ends this frame: children that parked below it close canceled (their spawning
        calls get their one result), this round's waiting calls end canceled, then the leftovers."""
        self.env.store.frames.cancel_open(self.exchange, reason=reason, principal=self.env.principal,
                                          then=self.env.calls_canceled, below=self.frame)
        self.cancel([call for call in waiting if call.status not in TERMINAL_TOOL_CALL_STATUSES], reason)
        self.cancel_leftovers(reason)

    def settle(self, outcome: TerminalOutcome) -> TerminalOutcome:
        """Settle with the authority's spend saved in the same transaction."""
        ledger = Ledger(self.authority.spent_tokens, self.authority.accounting_incomplete)
        failpoint("loop.before_settle")
        self.ending(lambda: self.env.store.exchanges.settle(self.exchange, outcome, principal=self.env.principal,
                                                           ledger=ledger))
        failpoint("loop.after_settle")
        return outcome

    def ending(self, end: Callable[[], object]) -> None:
        """End this frame with ``end``; past the compaction quota, loudly: the named
        ``control:compaction_quota`` row commits with the ending (SPEC L14)."""
        if self.episode.exhausted:
            self.env.store.compactions.stop_at_quota(self.exchange, narrative=self.env.narrative,
                                                     payload=quota_row(self.episode, self.env), then=end)
        else:
            end()

    def _live_text(self, turn: int) -> Callable[[str], None]:
        bus, session_id, exchange_id = self.env.bus, self.exchange.session_id, self.exchange.pk

        def send(text: str) -> None:
            bus.delta(session_id, {"type": "turn.delta", "exchange": exchange_id, "turn": turn, "text": text})

        return send


def model_name(provider: object) -> str:
    """The model a provider asks for (its profile's), else its name."""
    return str(getattr(provider, "model", None) or getattr(provider, "name", "?"))


def chat_attributes(model: str, reply: AssembledTurn) -> dict[str, str | int | Sequence[str]]:
    attributes: dict[str, str | int | Sequence[str]] = {"gen_ai.response.model": model}
    if reply.input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = reply.input_tokens
    if reply.output_tokens is not None:
        attributes["gen_ai.usage.output_tokens"] = reply.output_tokens
    if reply.finish_reason is not None:
        attributes["gen_ai.response.finish_reasons"] = (reply.finish_reason,)
    return attributes


def messages_text(request: ProviderRequest) -> str:
    """The request's messages as JSON text (what content capture records, after the product's screen)."""
    return json.dumps([{"role": m.role, "content": m.content} for m in request.messages], ensure_ascii=False)


def reply_text(reply: AssembledTurn) -> str:
    return json.dumps([{"role": "assistant", "content": reply.text,
                        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                                       for c in reply.tool_calls]}], ensure_ascii=False)


def _handoff(question: str) -> Parker:
    return lambda: {"handoff": True, "question": question}


def _parker(env: LoopEnv, request: GateCall, verdict: GateVerdict) -> Parker:
    return lambda: env.gate.park(request, env.scope, verdict)


__all__ = [
    "FrameDrive",
    "InputRefused",
    "LoopEnv",
    "ParkEntry",
    "RoundEnd",
    "RunAgain",
    "ToolOutcome",
    "admit_exchange",
    "drive_exchange",
    "park_entries",
    "park_tree",
    "run_frame",
    "run_turns",
    "run_turns_keyed",
    "tool_round",
]
