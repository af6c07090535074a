"""Sub-agents (SPEC S1, S2, L8, L12, L15): a delegate is a tool that opens a child frame and runs a
normal loop in it; the parent simply awaits a slow tool call.

The rules a child runs under, all decided here:

* **Depth** — the root frame is depth 0; a child is its parent's depth + 1, at most
  ``MAX_AGENT_DEPTH`` (5). Opening depth 6 is refused with a model-visible ``max_agent_depth`` error.
* **Capability subtraction** — the child's tools are the parent's ∩ the child agent's declared ∩ the
  requested ones (:func:`child_tool_names`), taken from the parent's own registry, so nothing is
  ever added; its ``execute_cmd`` programs are the parent's ∩ the agent's ask
  (:func:`child_exec_allowlist`). What it was granted is recorded once at spawn
  (:class:`FrameGrant`) and every environment of the frame is built from that record by
  :func:`frame_env`. The gate and its scope are the parent's: same user, same security groups. A call
  the gate wants a human for parks the whole tree (:class:`ChildDrive`); approving it resumes
  the child, then its parent (:mod:`loop.cascade`).
* **One ledger** — the child dispatches through the parent's :class:`~loop.budgets.DispatchAuthority`
  (reserved from the root): its spend is the root's; a child that overspends ends
  ``BudgetExceeded`` and the parent stops at its next round boundary.
* **One result** — the parent's call is recorded with the child's final text (or its partial output)
  and exactly one ``subagent_result`` row (text, outcome, token usage) in the same transaction.
* **One cancellation tree** — the child's token is the call's token, a child of the parent's; a stop
  reaches every descendant at once and is sticky. A cancelled child cancels its parent's call and
  its parent.
* **Its own compaction** — the child's turns run the driver's ``model_turn``, so its narrative is
  compacted on its own, with its own episode (quota, latch); a child past its compaction quota
  closes its frame with the quota's named row (SPEC L14).
* **A fresh model** — the caller passes the provider its selection chose; the selection record is
  kept on the child's frame and in its audit row.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from loop.bounds import MAX_AGENT_DEPTH, Bounds
from loop.cancellation import CancelToken
from loop.driver import FrameDrive, LoopEnv, run_frame
from loop.errors import ToolError
from loop.events import EventKind
from loop.failpoints import failpoint
from loop.frame_link import FrameLink
from loop.masking import withhold_credentials
from loop.models import Frame, ToolCallStatus
from loop.outcomes import AwaitingHuman, Canceled, Completed, TerminalOutcome, outcome_detail
from loop.ports import AgentSpec, DelegateReturn, ToolContext
from loop.provenance import UNTRUSTED
from loop.providers.base import AssembledTurn, LlmProvider
from loop.store import Store

RESULT_CAP = 8000  # the subagent_result's copy of the child's text


@dataclass(frozen=True)
class ChildRequest:
    """A child to run: its agent, task, tools (already subtracted), provider and selection record."""

    agent: AgentSpec
    task: str
    tools: Sequence[str]
    provider: LlmProvider
    selection: Mapping[str, Any]
    bounds: Bounds | None = None  # the child agent's bounds; the parent's when None


def frame_link(context: ToolContext) -> FrameLink:
    """The calling frame; a delegate called outside a kernel loop is a model-visible refusal."""
    if not isinstance(context.frame, FrameLink):
        raise ToolError("delegation is only available inside an agent loop", code="delegation_unavailable")
    return context.frame


def child_tool_names(parent: Iterable[str], agent: Iterable[str], requested: Iterable[str] | None) -> list[str]:
    """Capability subtraction: the parent's tools that the agent declares and (if given) the call
    requests, in the parent's order. Never a tool the parent lacks."""
    declared = set(agent)
    wanted = None if requested is None else set(requested)
    return [name for name in parent if name in declared and (wanted is None or name in wanted)]


def check_depth(link: FrameLink) -> int:
    """The child's depth, or a refusal the model sees."""
    depth = link.depth + 1
    if depth > MAX_AGENT_DEPTH:
        raise ToolError(f"delegation refused: a child at depth {depth} would exceed MAX_AGENT_DEPTH "
                        f"({MAX_AGENT_DEPTH}); do the work yourself", code="max_agent_depth")
    return depth


@dataclass
class ChildDrive(FrameDrive):
    """A child frame: it ends by closing its frame, never by settling the exchange; a call in it
    that needs a human parks the whole tree (its waiting calls go up to the root, which parks the
    exchange in one transaction; the spawning call stays running until the child resumes)."""

    done_turns: int = 0  # the turns this frame had before a resume
    defer_park: bool = True

    def first_turn(self) -> int:
        return self.done_turns  # a child's turns are its own (the exchange's counters still count them)

    def cancel_leftovers(self, reason: str) -> None:
        pass  # the root's settlement cancels what still waits in the exchange; a child owns no batch

    def finish(self, turn: int, reply: AssembledTurn, outcome: TerminalOutcome) -> None:
        failpoint("delegation.before_child_close")
        self.env.store.frames.finish(exchange=self.exchange, frame=self.frame, turn=turn, assembled=reply,
                                     principal=self.env.principal, spent_tokens=self.authority.spent_tokens,
                                     outcome=outcome.name)
        failpoint("delegation.after_child_close")  # closed, its result not yet its parent's: the un-wedge

    def settle(self, outcome: TerminalOutcome) -> TerminalOutcome:
        # A child past its own compaction quota closes its frame with the quota's named row.
        self.ending(lambda: self.env.store.frames.close(self.frame, outcome=outcome.name, principal=self.env.principal,
                                                        exchange=self.exchange))
        return outcome


@dataclass(frozen=True)
class FrameGrant:
    """What a frame was granted, recorded once by its creator at spawn (a child frame's
    ``control:frame_opened`` row; an async task's or cron job's row) and read back from there on
    every resume, never recomputed from the agent's definition (SPEC S2).

    ``exec_allowlist`` None: the parent's process grant, unnarrowed (the agent asked for nothing
    narrower).
    """

    tools: tuple[str, ...]
    exec_allowlist: tuple[str, ...] | None = None

    @classmethod
    def at_spawn(cls, parent: LoopEnv, *, tools: Sequence[str], asked_exec: Sequence[str] | None) -> FrameGrant:
        """A child's grant, subtracted from its parent's environment: ``tools`` must already be a
        subset of the parent's (:func:`child_tool_names`); the process grant is the parent's ∩
        the ask (a disjoint ask leaves none)."""
        return cls(tools=tuple(tools), exec_allowlist=child_exec_allowlist(parent.scope.exec_allowlist, asked_exec))

    def record(self) -> dict[str, Any]:
        """What the spawn row stores."""
        return {"tools": list(self.tools),
                "exec_allowlist": None if self.exec_allowlist is None else list(self.exec_allowlist)}

    @classmethod
    def recorded(cls, row: Mapping[str, Any]) -> FrameGrant:
        """A grant read back from its spawn row."""
        allow = row.get("exec_allowlist")
        return cls(tools=tuple(row.get("tools") or ()), exec_allowlist=None if allow is None else tuple(allow))


def child_exec_allowlist(parent: Sequence[str] | None, asked: Sequence[str] | None) -> tuple[str, ...] | None:
    """Subtraction of the process grant: the parent's programs the child asks for, in the parent's
    order. No ask keeps the parent's; an unnarrowed parent (None) gives the ask, which the tool
    still bounds by the deployment's list."""
    if asked is None:
        return None if parent is None else tuple(parent)
    if parent is None:
        return tuple(asked)
    wanted = set(asked)
    return tuple(name for name in parent if name in wanted)


def frame_env(parent: LoopEnv, grant: FrameGrant, *, agent: AgentSpec, provider: LlmProvider,
              bounds: Bounds | None, narrative: str) -> LoopEnv:
    """The one way a frame below a root gets its environment: its parent's (the same gate, scope,
    store, detector, compaction policy, hooks and cancellation wiring), narrowed by what it was
    granted at spawn — at most the parent's tools, taken from the parent's registry, and the
    recorded process grant — with its own agent, model and bounds.

    A sync child at spawn, a child resumed after an approval or recovered after a crash, and (in
    the product) an async task or cron run over its owner's root environment all come here.
    """
    scope = replace(parent.scope, exec_allowlist=grant.exec_allowlist)
    return replace(parent, provider=provider, tools=parent.tools.subset(grant.tools), agent=agent,
                   narrative=narrative, bounds=bounds or parent.bounds, discovery=None, scope=scope)


def child_drive(env: LoopEnv, link: FrameLink, frame: Frame, token: CancelToken, *, done_turns: int = 0,
                approved: frozenset[int] = frozenset()) -> ChildDrive:
    system = withhold_credentials(env.agent.system_prompt, what="system prompt", detector=env.detector)
    return ChildDrive(env, link.exchange, frame, link.authority, token, env.tools.specs(), system, approved,
                       done_turns=done_turns)


def run_child(link: FrameLink, request: ChildRequest, context: ToolContext) -> DelegateReturn:
    """Open the child frame, run a normal loop in it, and return the parent call's result (or, when
    the child parked, what it parked: the parent's call stays running and the tree waits).

    Raises:
        ToolError: ``max_agent_depth`` (nothing was opened).
    """
    check_depth(link)
    narrative = f"child:{request.agent.name}:c{context.call_id}:"
    grant = FrameGrant.at_spawn(link.env, tools=request.tools, asked_exec=request.agent.exec_allowlist)
    env = frame_env(link.env, grant, agent=request.agent, provider=request.provider, bounds=request.bounds,
                    narrative=narrative)
    grant = replace(grant, tools=tuple(env.tools.names()))  # what the registry really had
    frame = env.store.frames.open(exchange=link.exchange, parent=link.frame, parent_call_id=context.call_id,
                                  agent=request.agent.name, narrative=narrative, task=request.task,
                                  selection=request.selection, grant=grant.record(), principal=env.principal)
    failpoint("delegation.after_child_open")
    # The call's token, a child of the parent's: a stop reaches here at once.
    drive = child_drive(env, link, frame, context.cancel)
    outcome = run_frame(drive)
    if isinstance(outcome, AwaitingHuman):
        return DelegateReturn(content=outcome.question, status=ToolCallStatus.AWAITING_HUMAN, subagent={},
                              parked=tuple(drive.parked))
    return child_return(env.store, frame, outcome, parent_token=link.token)


def child_return(store: Store, frame: Frame, outcome: TerminalOutcome, *, parent_token: CancelToken | None
                 ) -> DelegateReturn:
    """A child's ending as its spawning call's result and its one ``subagent_result``. A canceled
    child cancels its parent (one tree)."""
    texts = store.frames.rows_of(frame, EventKind.ASSISTANT, EventKind.TOOL_RESULT)
    tokens_in = sum(int(p.get("input_tokens") or 0) for p in texts if "input_tokens" in p)
    tokens_out = sum(int(p.get("output_tokens") or 0) for p in texts if "output_tokens" in p)
    if isinstance(outcome, Completed):
        status, text = ToolCallStatus.COMPLETED, outcome.answer
    elif isinstance(outcome, Canceled):
        status = ToolCallStatus.CANCELED
        text = f"sub-agent {frame.agent} was cancelled ({outcome.reason})"
        if parent_token is not None:
            parent_token.cancel(outcome.reason or "a delegate was cancelled")  # one tree: the parent stops too
    else:
        status = ToolCallStatus.FAILED
        detail = ", ".join(f"{k}: {v}" for k, v in outcome_detail(outcome).items())
        partial = "\n".join(str(p.get("content", "")).strip() for p in texts if str(p.get("content", "")).strip())
        text = (f"sub-agent {frame.agent} ended {outcome.name} ({detail}).\n"
                f"Partial output:\n{partial[-4000:] or '(none)'}")
    subagent = {"agent": frame.agent, "content": text[:RESULT_CAP], "outcome": outcome.name, "frame": frame.pk,
                "depth": frame.depth, "input_tokens": tokens_in, "output_tokens": tokens_out}
    # A sub-agent's result inherits its child's taint (loop/provenance.py): any untrusted result or
    # summary in the child's own narrative (a grandchild's taint reached it through its result).
    labelled = store.frames.rows_of(frame, EventKind.TOOL_RESULT, EventKind.COMPACTION)
    if any(row.get("trust") == UNTRUSTED for row in labelled):
        subagent["trust"] = UNTRUSTED
    return DelegateReturn(content=text, status=status, subagent=subagent)


__all__ = ["ChildDrive", "ChildRequest", "DelegateReturn", "FrameGrant", "FrameLink", "check_depth", "child_drive",
           "child_exec_allowlist", "child_return", "child_tool_names", "frame_env", "frame_link", "run_child"]
