"""A call that needs a human inside a child frame parks the whole tree (SPEC S1, A3, R1-R3), and
recovery walks the frame tree: resume the child and then its parent, reap an interrupted parallel
batch, un-wedge a finished child, cascade to the root.

Every resume here builds a fresh environment and fresh providers (nothing of the first worker's
memory survives), as a resolver or a recovery on another worker would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from loop.bounds import Bounds
from loop.driver import run_turns_keyed
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, Frame, SessionEvent, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, Canceled, Completed
from loop.ports import AgentSpec, ChildSetup
from loop.providers.base import Delta, ProviderRequest, ToolResultMessage, fold_deltas
from loop.providers.loopback import text_turn, tool_turn
from loop.recovery import recover_exchange, resolve_pending
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool, ToolRegistry
from loop.verify import load_session_rows, verify_rows
from tests.loop.conftest import ECHO
from tests.loop.fakes import Effects, Held, ScriptedGate, approve_in_thread
from tests.loop.test_delegation import Delegate, Script, TreeProvider, agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

LEASE = 30.0


class Agents:
    """The kernel's ``FrameAgents``: a dict catalog, one provider for every rebuilt child."""

    def __init__(self, agents: Mapping[str, AgentSpec], provider: Any) -> None:
        self.agents, self.provider = agents, provider
        self.rebuilt: list[str] = []

    def child(self, name: str, selection: Mapping[str, Any]) -> ChildSetup:
        self.rebuilt.append(name)
        return ChildSetup(agent=self.agents[name], provider=self.provider)


def call_then_answer(*calls: tuple[str, dict[str, Any]], prefix: str = "answer") -> Script:
    """Make ``calls`` first; once the last message is a tool result, answer with it."""

    def script(request: ProviderRequest, n: int) -> list[Delta]:
        last = request.messages[-1]
        if isinstance(last, ToolResultMessage):
            return text_turn(f"{prefix}: {last.content[:80]}")
        return tool_turn(*calls)

    return script


def delegating(target: str, prefix: str = "root") -> Script:
    return call_then_answer(("delegate", {"agent": target, "task": f"work for {target}"}), prefix=prefix)


def world(make_env, scripts: Mapping[str, Script], agents: Mapping[str, AgentSpec], *tools: Any,
          gate: ScriptedGate | None = None, **extra: Any):
    """A fresh environment (a new worker): new providers, new delegate, the same rows."""
    provider = TreeProvider(scripts)
    env = make_env(provider, tools=ToolRegistry([Delegate(agents, provider), ECHO, *tools]), gate=gate,
                   frame_agents=Agents(agents, provider), **extra)
    return env, provider


def rows_ok(session) -> None:
    assert verify_rows(load_session_rows(session.pk)) == []


def subagent_results(session) -> list[SessionEvent]:
    return list(SessionEvent.objects.filter(session=session, kind=EventKind.SUBAGENT_RESULT).order_by("seq"))


def parked_child(make_env, deploy: Effects, gate: ScriptedGate):
    scripts = {"": delegating("kid"), "kid": call_then_answer(("deploy", {}), prefix="kid")}
    env, _ = world(make_env, scripts, {"kid": agent("kid", "deploy")}, deploy.tool, gate=gate)
    return run_turns_keyed(env, request_key="k", content="deploy via the kid"), scripts


def test_a_call_needing_approval_in_a_child_parks_the_whole_tree(make_env, session):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    result, _ = parked_child(make_env, deploy, gate)

    assert isinstance(result.outcome, AwaitingHuman)
    exchange = Exchange.objects.get(pk=result.exchange_id)
    assert (exchange.status, exchange.claim_token) == (ExchangeStatus.PARKED, "")  # nobody waits
    kid = Frame.objects.get(session=session, depth=1)
    assert kid.status == "open"
    waiting = ToolCall.objects.get(frame=kid, tool="deploy")
    assert waiting.status == ToolCallStatus.AWAITING_HUMAN and [c.call_id for c in gate.parked] == [waiting.pk]
    assert ToolCall.objects.get(frame__depth=0, tool="delegate").status == ToolCallStatus.RUNNING
    assert deploy.runs == 0
    card = SessionEvent.objects.get(session=session, kind=EventKind.APPROVAL_REQUESTED)
    assert card.payload["tool_call_id"] == waiting.pk


def test_approving_resumes_the_child_then_the_parent(make_env, session, store):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    _result, scripts = parked_child(make_env, deploy, gate)
    call = ToolCall.objects.select_related("frame").get(tool="deploy")

    env, provider = world(make_env, scripts, {"kid": agent("kid", "deploy")}, deploy.tool, gate=gate)
    resumed = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")

    assert resumed.outcome == Completed(answer="root: kid: deploy #1")
    assert deploy.runs == 1
    assert set(env.frame_agents.rebuilt) == {"kid"}  # the child ran as its own agent, not the root's
    # The child answered first (its own narrative), then the root: in that order, one model call each.
    assert [str(r.metadata["narrative"]).split(":")[:2] for r in provider.requests] == [["child", "kid"], [""]]
    kid = Frame.objects.get(session=session, depth=1)
    assert (kid.status, kid.outcome) == ("closed", "completed")
    assert [e.payload["content"] for e in subagent_results(session)] == ["kid: deploy #1"]
    rows_ok(session)


def test_rejecting_gives_the_child_a_rejection_result(make_env, session):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    _, scripts = parked_child(make_env, deploy, gate)
    call = ToolCall.objects.select_related("frame").get(tool="deploy")

    env, _ = world(make_env, scripts, {"kid": agent("kid", "deploy")}, deploy.tool, gate=gate)
    resumed = resolve_pending(env, call, resolution="reject", reason="not today", claim_token="resolver")

    assert isinstance(resumed.outcome, Completed) and deploy.runs == 0
    rejected = ToolCall.objects.get(pk=call.pk)
    assert rejected.status == ToolCallStatus.REJECTED and "not today" in rejected.result
    # The child's model read the rejection in its own narrative and answered with it.
    assert "rejected by a human: not today" in subagent_results(session)[0].payload["content"]
    rows_ok(session)


def test_a_restart_while_parked_loses_nothing(make_env, session, store, clock):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    result, scripts = parked_child(make_env, deploy, gate)
    call = ToolCall.objects.select_related("frame").get(tool="deploy")
    # A resolver took the approval and died before running the call.
    assert store.exchanges.claim_for_recovery(result.exchange_id, "dead-resolver", principal="user:1")
    assert store.calls.take_awaiting(call, to_status=ToolCallStatus.APPROVED, principal="user:1")
    clock.advance(LEASE + 1)

    env, _ = world(make_env, scripts, {"kid": agent("kid", "deploy")}, deploy.tool, gate=gate)
    checked = len(gate.checked)
    resumed = recover_exchange(env, result.exchange_id, claim_token="rescuer")

    assert resumed.outcome == Completed(answer="root: kid: deploy #1")
    assert deploy.runs == 1 and len(gate.checked) == checked  # the human's yes stands: not re-gated
    rows_ok(session)


def test_a_parked_grandchild_cascades_through_every_level(make_env, session):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    scripts = {"": delegating("kid"), "kid": delegating("grandkid", prefix="kid"),
               "grandkid": call_then_answer(("deploy", {}), prefix="grandkid")}
    agents = {"kid": agent("kid", "delegate", "deploy"), "grandkid": agent("grandkid", "deploy")}
    env, _ = world(make_env, scripts, agents, deploy.tool, gate=gate)
    parked = run_turns_keyed(env, request_key="k", content="deep deploy")
    assert isinstance(parked.outcome, AwaitingHuman)
    assert list(Frame.objects.filter(session=session).order_by("depth").values_list("status", flat=True)) == [
        "open", "open", "open"]

    env, _ = world(make_env, scripts, agents, deploy.tool, gate=gate)
    call = ToolCall.objects.select_related("frame").get(tool="deploy")
    resumed = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")

    assert resumed.outcome == Completed(answer="root: kid: grandkid: deploy #1")
    assert [e.payload["depth"] for e in subagent_results(session)] == [2, 1]  # deepest first, then up
    rows_ok(session)


def test_a_child_that_parks_again_keeps_the_tree_parked(make_env, session):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})

    def twice(request: ProviderRequest, n: int) -> list[Delta]:
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        return tool_turn(("deploy", {})) if len(results) < 2 else text_turn(f"kid: {results[-1].content}")

    scripts = {"": delegating("kid"), "kid": twice}
    agents = {"kid": agent("kid", "deploy")}
    env, _ = world(make_env, scripts, agents, deploy.tool, gate=gate)
    run_turns_keyed(env, request_key="k", content="deploy twice")
    first = ToolCall.objects.select_related("frame").get(tool="deploy")
    again = resolve_pending(world(make_env, scripts, agents, deploy.tool, gate=gate)[0], first,
                            resolution="approve", reason="", claim_token="r1")
    assert isinstance(again.outcome, AwaitingHuman) and deploy.runs == 1
    second = ToolCall.objects.select_related("frame").get(tool="deploy", status=ToolCallStatus.AWAITING_HUMAN)
    done = resolve_pending(world(make_env, scripts, agents, deploy.tool, gate=gate)[0], second,
                           resolution="approve", reason="", claim_token="r2")
    assert done.outcome == Completed(answer="root: kid: deploy #2") and deploy.runs == 2
    rows_ok(session)


def test_a_stop_while_a_child_is_parked_closes_the_tree(make_env, session, store):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    result, scripts = parked_child(make_env, deploy, gate)
    store.exchanges.request_cancel(result.exchange_id, principal="user:1")

    env, provider = world(make_env, scripts, {"kid": agent("kid", "deploy")}, deploy.tool, gate=gate)
    stopped = recover_exchange(env, result.exchange_id, claim_token="stopper")

    assert isinstance(stopped.outcome, Canceled) and deploy.runs == 0 and provider.requests == []
    assert set(ToolCall.objects.filter(session=session).values_list("status", flat=True)) == {"canceled"}
    assert Frame.objects.get(depth=1).status == "closed"
    rows_ok(session)


# --- crashes inside child frames ---------------------------------------------------------------


def crashed_child(make_env, store, scripts, agents, *tools, gate=None, kid_calls=(("deploy", {}),)):
    """The rows a worker leaves when it dies inside a child's round: the root's delegate call is
    running, the child's frame is open, the child's message end is recorded (and the first intent)."""
    env, _ = world(make_env, scripts, agents, *tools, gate=gate)
    exchange = store.exchanges.admit(session_id=env.scope.session_id, request_key="crashed", content="go",
                                     principal=env.principal, config={}, claim_token="dead-worker").exchange
    root = store.exchanges.root_frame(exchange)
    ((delegate, _),) = store.exchanges.record_message_end(
        exchange=exchange, frame=root, turn=1, principal=env.principal, spent_tokens=0, journal=1,
        assembled=fold_deltas(tool_turn(("delegate", {"agent": "kid", "task": "work for kid"}))))
    kid = store.frames.open(exchange=exchange, parent=root, parent_call_id=delegate.pk, agent="kid",
                            narrative=f"child:kid:c{delegate.pk}:", task="work for kid", selection={},
                            grant={"tools": list(agents["kid"].tools)}, principal=env.principal)
    planned = store.exchanges.record_message_end(exchange=exchange, frame=kid, turn=1, principal=env.principal,
                                                 spent_tokens=0, journal=1,
                                                 assembled=fold_deltas(tool_turn(*kid_calls)))
    return exchange, kid, [call for call, _ in planned]


def test_a_crash_inside_a_child_is_recovered_and_the_parent_continues(make_env, session, store, clock):
    deploy = Effects("deploy")
    scripts = {"": delegating("kid"), "kid": call_then_answer(("deploy", {}), prefix="kid")}
    agents = {"kid": agent("kid", "deploy")}
    exchange, kid, (running,) = crashed_child(make_env, store, scripts, agents, deploy.tool)
    assert running.status == ToolCallStatus.RUNNING
    clock.advance(LEASE + 1)

    env, _provider = world(make_env, scripts, agents, deploy.tool)
    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert result.outcome == Completed(answer="root: kid: deploy #1")
    assert deploy.runs == 1  # a RERUN call re-gated and run again, in the child's own frame
    assert ToolCall.objects.get(pk=running.pk).status == ToolCallStatus.COMPLETED
    assert SessionEvent.objects.get(kind=EventKind.TOOL_RESULT, payload__key=running.call_key,
                                    narrative=kid.narrative).narrative == kid.narrative
    assert set(env.frame_agents.rebuilt) == {"kid"}
    rows_ok(session)


def test_a_mark_interrupted_call_in_a_child_is_never_run_again(make_env, session, store, clock):
    cmd = Effects("cmd", hint=RestartHint.MARK_INTERRUPTED)
    scripts = {"": delegating("kid"), "kid": call_then_answer(("cmd", {}), prefix="kid")}
    agents = {"kid": agent("kid", "cmd")}
    exchange, _, (running,) = crashed_child(make_env, store, scripts, agents, cmd.tool, kid_calls=(("cmd", {}),))
    clock.advance(LEASE + 1)

    env, _ = world(make_env, scripts, agents, cmd.tool)
    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert isinstance(result.outcome, Completed) and cmd.runs == 0
    assert ToolCall.objects.get(pk=running.pk).status == ToolCallStatus.INTERRUPTED
    assert "interrupted" in subagent_results(session)[0].payload["content"]
    rows_ok(session)


def test_a_finished_child_whose_result_never_reached_its_parent_is_unwedged_without_a_model_call(
        make_env, session, store, clock):
    scripts = {"": delegating("kid"), "kid": call_then_answer(("echo", {"text": "x"}), prefix="kid")}
    agents = {"kid": agent("kid", "echo")}
    exchange, kid, (running,) = crashed_child(make_env, store, scripts, agents, kid_calls=(("echo", {"text": "x"}),))
    store.calls.record_result(running, status=ToolCallStatus.COMPLETED, content="echo: x", is_error=False,
                              truncated=False, principal="user:1", narrative=kid.narrative)
    store.frames.finish(exchange=exchange, frame=kid, turn=2, assembled=fold_deltas(text_turn("kid found x")),
                        principal="user:1", spent_tokens=0, outcome="completed")  # then the worker died
    clock.advance(LEASE + 1)

    env, provider = world(make_env, scripts, agents)
    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert result.outcome == Completed(answer="root: kid found x")
    assert [r.metadata["narrative"] for r in provider.requests] == [""]  # the child's model was not called
    assert [e.payload["content"] for e in subagent_results(session)] == ["kid found x"]
    rows_ok(session)


def test_an_interrupted_parallel_batch_is_reaped_and_the_parent_goes_on(make_env, session, store, clock):
    scripts = {"": call_then_answer(("delegate", {"agent": "left", "task": "l"}),
                                    ("delegate", {"agent": "right", "task": "r"}), prefix="root"),
               "left": call_then_answer(("echo", {"text": "l"})), "right": call_then_answer(("echo", {"text": "r"}))}
    agents = {"left": agent("left", "echo"), "right": agent("right", "echo")}
    env, _ = world(make_env, scripts, agents)
    exchange = store.exchanges.admit(session_id=env.scope.session_id, request_key="batch", content="go",
                                     principal=env.principal, config={}, claim_token="dead-worker").exchange
    root = store.exchanges.root_frame(exchange)
    calls = store.exchanges.record_message_end(
        exchange=exchange, frame=root, turn=1, principal=env.principal, spent_tokens=0, journal=2,
        assembled=fold_deltas(tool_turn(("delegate", {"agent": "left", "task": "l"}),
                                        ("delegate", {"agent": "right", "task": "r"}))))
    for (call, _), name in zip(calls, ("left", "right"), strict=True):
        store.frames.open(exchange=exchange, parent=root, parent_call_id=call.pk, agent=name,
                          narrative=f"child:{name}:c{call.pk}:", task=name, selection={}, grant={"tools": ["echo"]},
                          principal=env.principal)
    clock.advance(LEASE + 1)

    env, provider = world(make_env, scripts, agents)
    result = recover_exchange(env, exchange.pk, claim_token="rescuer")

    assert isinstance(result.outcome, Completed)
    spawning = ToolCall.objects.filter(frame=root).order_by("index")
    assert [c.status for c in spawning] == [ToolCallStatus.FAILED, ToolCallStatus.FAILED]
    assert all("parallel batch" in c.result for c in spawning)
    assert set(Frame.objects.filter(depth=1).values_list("status", flat=True)) == {"closed"}
    assert [r.metadata["narrative"] for r in provider.requests] == [""]  # neither child ran again
    rows_ok(session)


def test_a_stop_during_a_resumed_childs_call_cancels_the_tree(make_env, session, store):
    held = Held()
    hold = FunctionTool("hold", "Hold.", {"type": "object"}, held)
    gate = ScriptedGate(require={"hold"})
    scripts = {"": delegating("kid"), "kid": call_then_answer(("hold", {"n": "a"}), prefix="kid")}
    agents = {"kid": agent("kid", "hold")}
    env, _ = world(make_env, scripts, agents, hold, gate=gate, cancel_poll_interval=0.05)
    parked = run_turns_keyed(env, request_key="k", content="hold")
    call = ToolCall.objects.select_related("frame").get(tool="hold")
    env, provider = world(make_env, scripts, agents, hold, gate=gate, cancel_poll_interval=0.05,
                          bounds=Bounds(tool_timeout=60))
    worker, box = approve_in_thread(env, call)
    assert held.entered.wait(10)
    store.exchanges.request_cancel(parked.exchange_id, principal="user:1")
    worker.join(15)

    assert isinstance(box["result"].outcome, Canceled)
    assert held.log == ["enter a", "exit a"] and provider.requests == []
    assert set(ToolCall.objects.filter(session=session).values_list("status", flat=True)) == {"canceled"}
    exchange = Exchange.objects.get(pk=parked.exchange_id)
    last = SessionEvent.objects.filter(exchange=exchange).order_by("-seq").first()
    assert exchange.receipt["last_seq"] == last.seq
    rows_ok(session)


def test_parallel_children_that_both_park_resume_one_after_the_other(make_env, session):
    deploy, gate = Effects("deploy"), ScriptedGate(require={"deploy"})
    both = call_then_answer(("delegate", {"agent": "left", "task": "l"}), ("delegate", {"agent": "right", "task": "r"}),
                            prefix="root")
    scripts = {"": both, "left": call_then_answer(("deploy", {}), prefix="left"),
               "right": call_then_answer(("deploy", {}), prefix="right")}
    agents = {"left": agent("left", "deploy"), "right": agent("right", "deploy")}
    env, _ = world(make_env, scripts, agents, deploy.tool, gate=gate)
    parked = run_turns_keyed(env, request_key="k", content="two at once")
    assert isinstance(parked.outcome, AwaitingHuman) and len(parked.outcome.call_keys) == 2  # one park, both cards

    first, second = ToolCall.objects.select_related("frame").filter(tool="deploy").order_by("frame__id")
    halfway = resolve_pending(world(make_env, scripts, agents, deploy.tool, gate=gate)[0], first,
                              resolution="approve", reason="", claim_token="r1")
    assert isinstance(halfway.outcome, AwaitingHuman) and deploy.runs == 1  # the other card still waits
    done = resolve_pending(world(make_env, scripts, agents, deploy.tool, gate=gate)[0], second,
                           resolution="approve", reason="", claim_token="r2")

    assert isinstance(done.outcome, Completed) and deploy.runs == 2
    spawning = ToolCall.objects.filter(tool="delegate").order_by("index")
    assert [c.status for c in spawning] == [ToolCallStatus.COMPLETED, ToolCallStatus.COMPLETED]  # neither reaped
    assert sorted(e.payload["agent"] for e in subagent_results(session)) == ["left", "right"]  # one each
    rows_ok(session)
