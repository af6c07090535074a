"""Recovery over the frame tree (SPEC R1 steps 1-4, S1): a parked or interrupted tree of child
frames is finished deepest first and cascades to the root.

A child frame's call that needs a human parks the whole tree: the exchange parks, the child's frame
stays open and its spawning call stays ``running``. Whoever continues the exchange (a resolver
after an answer, recovery after a crash) claims it and, here:

1. **Reaps** an interrupted parallel batch: in an exchange that was running (not parked), two or
   more open sibling frames (one parent frame) with nothing in them waiting for a human: a crash
   cut them off mid-run. Deliberately lossy: their
   spawning calls fail, the frames close, nothing in them runs again.
2. **Resolves every frame's unfinished calls**, deepest frame first, each in its own frame's
   environment (:func:`frame_env`: its own agent and model, rebuilt from the frame's rows through
   ``LoopEnv.frame_agents``): an approved call runs with the gate skipped, a ``running`` one is
   re-gated and re-run unless its tool declares ``MARK_INTERRUPTED`` (then a typed ``interrupted``
   result), a ``planned`` one runs its round. A delegate call whose child frame is still open is
   left to the cascade; one whose child never opened is a ``MARK_INTERRUPTED`` call like any other.
3. **Un-wedges**: a delegate call whose child closed but whose result never reached it gets the
   child's result without a model call.
4. **Cascades**: the deepest open frame runs its loop on to its end (or parks the tree again); its
   ending becomes its spawning call's result; then its parent, up to the root, whose loop the
   caller drives on (:func:`loop.driver.drive_exchange`).

A stop at any point ends every open frame ``canceled`` (their spawning calls get their one result)
before the exchange settles.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from loop.cancellation import CancelToken
from loop.delegation import FrameGrant, child_drive, child_return
from loop.delegation import frame_env as child_frame_env
from loop.driver import FrameDrive, LoopEnv, ParkEntry, park_tree, run_frame, tool_round
from loop.errors import HarnessError
from loop.events import EventKind
from loop.frame_link import FrameLink
from loop.models import Exchange, ExchangeStatus, Frame, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, Canceled, Completed, RunOutcome, TerminalOutcome, outcome_from_receipt
from loop.steps import RunAgain
from loop.store import parsed_from_row
from loop.tools.hints import RestartHint

# "outcome unknown": the effect may or may not have happened (issue 29 names the ending so).
INTERRUPTED_RESULT = ("interrupted: outcome unknown: the worker driving this call stopped before it finished; "
                      "it was not retried")
REAPED_RESULT = ("interrupted: this delegate ran in a parallel batch that a crash cut off; it was not retried "
                 "(do the work again if it is still needed)")
UNFINISHED = (ToolCallStatus.PLANNED, ToolCallStatus.RUNNING, ToolCallStatus.APPROVED)


@dataclass
class TreeState:
    """What finishing the tree's calls left: calls to park, or a stop that settled the exchange."""

    parked: list[ParkEntry] = field(default_factory=list)
    stopped: Canceled | None = None


def frame_env(env: LoopEnv, frame: Frame) -> LoopEnv:
    """The environment a stored frame runs in: the root's, or a child's rebuilt from its rows (its
    own agent and model from the catalog, never the root's; the grant recorded when it opened,
    through the one :func:`loop.delegation.frame_env`).

    Raises:
        HarnessError: ``frame_unrebuildable`` when the product gave no ``frame_agents``.
    """
    if frame.depth == 0:
        return env
    if env.frame_agents is None:
        raise HarnessError(f"frame {frame.pk} cannot be rebuilt: no frame_agents", code="frame_unrebuildable")
    setup = env.frame_agents.child(frame.agent, frame.selection)
    opened = env.store.frames.rows_of(frame, EventKind.FRAME_OPENED)
    if not opened:
        raise HarnessError(f"frame {frame.pk} has no opening row to read its grant from", code="frame_unrebuildable")
    return child_frame_env(env, FrameGrant.recorded(opened[0]), agent=setup.agent, provider=setup.provider,
                           bounds=setup.bounds, narrative=frame.narrative)


def _done_turns(env: LoopEnv, frame: Frame) -> int:
    turns = [int(row.get("turn") or 0) for row in env.store.frames.rows_of(frame, EventKind.ASSISTANT)]
    return max(turns, default=0)


def _stored_outcome(env: LoopEnv, frame: Frame) -> TerminalOutcome:
    """A closed child's ending, typed, for the un-wedge (its answer is its last assistant text)."""
    if frame.outcome == "completed":
        texts = env.store.frames.rows_of(frame, EventKind.ASSISTANT)
        return Completed(answer=str(texts[-1].get("content", "")) if texts else "")
    outcome = outcome_from_receipt(frame.outcome, None)
    return outcome if not isinstance(outcome, AwaitingHuman) else Canceled("the delegate's frame closed unfinished")


def reap(env: LoopEnv, exchange: Exchange) -> int:
    """Step 1: close an interrupted parallel batch (≥2 open siblings with nothing waiting for a
    human in them); their spawning calls fail. Returns how many frames were reaped."""
    store = env.store
    if exchange.status != ExchangeStatus.OPEN:
        return 0  # a parked tree's open frames waited properly (parallel siblings may all have parked)
    open_frames = store.frames.open_children(exchange.pk)
    waiting = {call.frame_id for call in store.calls.calls_in(exchange.pk, ToolCallStatus.AWAITING_HUMAN,
                                                              ToolCallStatus.APPROVED)}
    siblings: dict[int, list[Frame]] = defaultdict(list)
    for frame in open_frames:
        assert frame.parent_call is not None
        siblings[frame.parent_call.frame_id].append(frame)
    reaped: list[Frame] = []
    for group in siblings.values():
        if len(group) < 2:
            continue
        for frame in group:
            below = [f for f in open_frames if f.pk == frame.pk or frame.pk in store.frames.ancestors(f)]
            if not any(f.pk in waiting for f in below):
                reaped.append(frame)
    if reaped:
        store.frames.cancel_open(exchange, reason=REAPED_RESULT, principal=env.principal, then=env.calls_canceled,
                                 only=reaped, spawn_status=ToolCallStatus.FAILED)
    return len(reaped)


def finish_calls(env: LoopEnv, exchange: Exchange, authority_drive: FrameDrive, token: CancelToken) -> TreeState:
    """Steps 2 and 3: every frame's unfinished calls, deepest frame first, in its own environment."""
    store, state = env.store, TreeState()
    by_frame: dict[int, list[ToolCall]] = defaultdict(list)
    frames: dict[int, Frame] = {}
    for call in store.calls.calls_in(exchange.pk, *UNFINISHED):
        by_frame[call.frame_id].append(call)
        frames[call.frame_id] = call.frame
    for frame in sorted(frames.values(), key=lambda f: (-f.depth, f.pk)):
        fenv = frame_env(env, frame)
        runnable: list[ToolCall] = []
        for call in by_frame[frame.pk]:
            child = store.frames.child_of(call.pk) if call.status == ToolCallStatus.RUNNING else None
            if child is not None and child.status == "open":
                continue  # the cascade ends it
            if child is not None:  # the un-wedge: the child ended, its result never reached this call
                child = store.frames.get(child.pk)
                end_child(env, exchange, child, _stored_outcome(env, child))
                continue
            tool = fenv.tools.get(call.tool)
            if call.status == ToolCallStatus.RUNNING and tool is not None \
                    and tool.restart_hint == RestartHint.MARK_INTERRUPTED:
                store.calls.record_result(call, status=ToolCallStatus.INTERRUPTED, content=INTERRUPTED_RESULT,
                                          is_error=True, truncated=False, principal=env.principal,
                                          narrative=frame.narrative)
                continue
            runnable.append(call)
        if not runnable:
            continue
        approved = frozenset(call.pk for call in runnable if call.status == ToolCallStatus.APPROVED)
        drive = _drive_for(fenv, exchange, frame, authority_drive, token, approved)
        match tool_round(drive, [(call, parsed_from_row(call)) for call in runnable]):
            case RunAgain():
                pass
            case AwaitingHuman():
                state.parked.extend(drive.parked)
            case Canceled():  # a stop: the frame settled (a child's closed) canceled
                state.stopped = Canceled(token.reason or "stop requested")
                if frame.depth > 0:
                    end_child(env, exchange, store.frames.get(frame.pk), state.stopped)
                return state
    return state


def end_child(env: LoopEnv, exchange: Exchange, frame: Frame, outcome: TerminalOutcome) -> None:
    """A child's ending reaches its spawning call: the result and its one ``subagent_result``."""
    result = child_return(env.store, frame, outcome, parent_token=None)
    env.store.frames.end_child(frame, status=result.status, content=result.content, subagent=result.subagent,
                               principal=env.principal, exchange=exchange)


def _drive_for(env: LoopEnv, exchange: Exchange, frame: Frame, root: FrameDrive, token: CancelToken,
               approved: frozenset[int]) -> FrameDrive:
    if frame.depth == 0:
        drive = FrameDrive.start(env, exchange, token, approved)
        drive.authority = root.authority
        drive.defer_park = True
        return drive
    link = FrameLink(env=env, exchange=exchange, frame=frame, authority=root.authority, token=token)
    return child_drive(env, link, frame, token, done_turns=_done_turns(env, frame), approved=approved)


def cascade(env: LoopEnv, exchange: Exchange, root: FrameDrive, token: CancelToken) -> RunOutcome | None:
    """Step 4: run the deepest open frame's loop to its end, hand its ending to its spawning call,
    and go up. Returns AwaitingHuman (the tree parked again, its entries parked), Canceled (a stop
    ended the tree; the exchange is not settled yet), or None: the root's loop goes on."""
    store = env.store
    while True:
        open_frames = store.frames.open_children(exchange.pk)
        if token.cancelled:
            return Canceled(token.reason or "stop requested")
        if not open_frames:
            return None
        frame = open_frames[0]  # the deepest
        fenv = frame_env(env, frame)
        drive = _drive_for(fenv, exchange, frame, root, token, frozenset())
        assert frame.parent_call is not None
        outcome = run_frame(drive)
        if isinstance(outcome, AwaitingHuman):  # the tree waits again: park what this frame's loop left
            return park_tree(env, exchange, drive.parked)
        end_child(env, exchange, frame, outcome)
        if isinstance(outcome, Canceled):
            token.cancel(outcome.reason or "a delegate was cancelled")
