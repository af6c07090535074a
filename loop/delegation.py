"""Sub-agents (SPEC S1, S2, L8, L12, L15): a delegate is a tool that opens a child frame and runs a
normal loop in it; the parent simply awaits a slow tool call.

The rules a child runs under, all decided here:

* **Depth** — the root frame is depth 0; a child is its parent's depth + 1, at most
  ``MAX_AGENT_DEPTH`` (5). Opening depth 6 is refused with a model-visible ``max_agent_depth`` error.
* **Capability subtraction** — the child's tools are the parent's ∩ the child agent's declared ∩ the
  requested ones (:func:`child_tool_names`), taken from the parent's own registry, so nothing is
  ever added. The gate and its scope are the parent's: same user, same security groups. A call
  the gate wants a human for is refused inside a delegate (a child cannot park the tree; the
  parent may make that call itself, where it parks as usual).
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
from loop.driver import _Drive, run_frame
from loop.errors import ToolError
from loop.events import EventKind
from loop.failpoints import failpoint
from loop.frame_link import FrameLink
from loop.masking import withhold_credentials
from loop.models import SessionEvent, ToolCallStatus
from loop.outcomes import AwaitingHuman, Canceled, Completed, RunOutcome, TerminalOutcome, outcome_detail
from loop.ports import AgentSpec, DelegateReturn, Gate, GateCall, GateVerdict, ToolContext, TurnScope
from loop.providers.base import AssembledTurn, LlmProvider
from loop.tools.fanout import RoundResult

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


class _NoParkGate:
    """The parent's gate with its scope; a ``require`` becomes a refusal inside a delegate."""

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        verdict = self.gate.check(call, scope)
        if verdict.action == "require":
            return GateVerdict("deny", f"needs a human's approval, which a delegate cannot wait for "
                                       f"({verdict.reason or 'approval required'}); the parent may make this call",
                               verdict.rule_id, verdict.detail)
        return verdict

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        raise AssertionError("a delegate never parks a call")


@dataclass
class _ChildDrive(_Drive):
    """A child frame: it ends by closing its frame, never by settling the exchange."""

    def first_turn(self) -> int:
        return 0  # a child's turns are its own (the exchange's counters still count them)

    def cancel_leftovers(self, reason: str) -> None:
        pass  # the root's settlement cancels what still waits in the exchange; a child owns no batch

    def finish(self, turn: int, reply: AssembledTurn, outcome: TerminalOutcome) -> None:
        self.env.store.finish_child_turn(exchange=self.exchange, frame=self.frame, turn=turn, assembled=reply,
                                         principal=self.env.principal, spent_tokens=self.authority.spent_tokens,
                                         outcome=outcome.name)

    def settle(self, outcome: TerminalOutcome) -> TerminalOutcome:
        # A child past its own compaction quota closes its frame with the quota's named row.
        self.ending(lambda: self.env.store.close_frame(self.frame, outcome=outcome.name, principal=self.env.principal,
                                                       exchange=self.exchange))
        return outcome

    def park(self, result: RoundResult) -> RunOutcome | None:
        # Only a handoff gets here (the gate never says require in a child): refuse it, go on.
        waiting = [call for call, _, _ in result.parked] + [call for call, _ in result.handoffs]
        for call in waiting:
            self.env.store.record_result(call, status=ToolCallStatus.REJECTED, is_error=True, truncated=False,
                                         content="refused: a delegate cannot wait for a human; answer with what "
                                                 "you have and say what is missing",
                                         principal=self.env.principal, narrative=self.env.narrative)
        return None


def _usage(session_id: int, narrative: str) -> tuple[int, int]:
    rows = SessionEvent.objects.filter(session_id=session_id, narrative=narrative, kind=EventKind.ASSISTANT)
    tokens_in = tokens_out = 0
    for payload in rows.values_list("payload", flat=True):
        tokens_in += int(payload.get("input_tokens") or 0)
        tokens_out += int(payload.get("output_tokens") or 0)
    return tokens_in, tokens_out


def _partial(session_id: int, narrative: str) -> str:
    rows = SessionEvent.objects.filter(session_id=session_id, narrative=narrative,
                                       kind__in=[EventKind.ASSISTANT, EventKind.TOOL_RESULT]).order_by("seq")
    texts = [str(payload.get("content", "")).strip() for payload in rows.values_list("payload", flat=True)]
    return "\n".join(text for text in texts if text)[-4000:]


def run_child(link: FrameLink, request: ChildRequest, context: ToolContext) -> DelegateReturn:
    """Open the child frame, run a normal loop in it, and return the parent call's result.

    Raises:
        ToolError: ``max_agent_depth`` (nothing was opened).
    """
    depth = check_depth(link)
    parent = link.env
    narrative = f"child:{request.agent.name}:c{context.call_id}:"
    env = replace(parent, provider=request.provider, tools=parent.tools.subset(request.tools), agent=request.agent,
                  gate=_NoParkGate(parent.gate), narrative=narrative, bounds=request.bounds or parent.bounds,
                  discovery=None)
    frame = env.store.open_frame(exchange=link.exchange, parent=link.frame, parent_call_id=context.call_id,
                                 agent=request.agent.name, narrative=narrative, task=request.task,
                                 selection=request.selection, tools=env.tools.names(), principal=env.principal)
    failpoint("delegation.after_child_open")
    token = context.cancel  # a child of the parent's token: a stop reaches here at once
    drive = _ChildDrive(env, link.exchange, frame, link.authority, token, env.tools.specs(),
                        withhold_credentials(request.agent.system_prompt, what="system prompt", detector=env.detector))
    outcome = run_frame(drive)
    if isinstance(outcome, AwaitingHuman):  # cannot happen (a child never parks); keep the tree well-formed
        outcome = Canceled("a delegate cannot wait for a human")
        drive.settle(outcome)
    tokens_in, tokens_out = _usage(link.exchange.session_id, narrative)
    if isinstance(outcome, Completed):
        status, text = ToolCallStatus.COMPLETED, outcome.answer
    elif isinstance(outcome, Canceled):
        status = ToolCallStatus.CANCELED
        text = f"sub-agent {request.agent.name} was cancelled ({outcome.reason})"
        link.token.cancel(outcome.reason or "a delegate was cancelled")  # one tree: the parent stops too
    else:
        status = ToolCallStatus.FAILED
        detail = ", ".join(f"{k}: {v}" for k, v in outcome_detail(outcome).items())
        partial = _partial(link.exchange.session_id, narrative)
        text = (f"sub-agent {request.agent.name} ended {outcome.name} ({detail}).\n"
                f"Partial output:\n{partial or '(none)'}")
    subagent = {"agent": request.agent.name, "content": text[:RESULT_CAP], "outcome": outcome.name, "frame": frame.pk,
                "depth": depth, "input_tokens": tokens_in, "output_tokens": tokens_out}
    return DelegateReturn(content=text, status=status, subagent=subagent)


__all__ = ["ChildRequest", "DelegateReturn", "FrameLink", "check_depth", "child_tool_names", "frame_link",
           "run_child"]
