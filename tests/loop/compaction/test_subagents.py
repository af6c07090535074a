"""Sub-agents compact their own narrative, never the parent's (SPEC L14, S1): a real delegate opens
a child frame whose long narrative crosses the threshold; the child's cycles write their rows in
the child's narrative and count the child's own quota."""

from __future__ import annotations

import pytest

from loop.bounds import Bounds
from loop.compaction.extractive import extractive_summary
from loop.compaction.policy import CompactionPolicy
from loop.compaction.prompt import is_summary_request
from loop.driver import run_turns_keyed
from loop.events import EventKind
from loop.models import Exchange, Frame, SessionEvent, ToolCall
from loop.outcomes import AwaitingHuman, Completed
from loop.providers.base import Delta, ProviderRequest, SummaryMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.recovery import resolve_pending
from loop.tools.registry import FunctionTool, ToolRegistry
from loop.verify import load_session_rows, verify_rows
from tests.loop.compaction.conftest import SMALL, fact
from tests.loop.conftest import ECHO
from tests.loop.fakes import ScriptedGate
from tests.loop.test_delegation import Delegate, agent

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

def tree_model(child_rounds: int) -> LoopbackProvider:
    """The root delegates once to ``helper`` and then answers; the helper asks ``echo`` for a
    fact-laden result ``child_rounds`` times, then answers. Summary requests get the extractive
    summary."""

    def respond(request: ProviderRequest) -> list[Delta]:
        if is_summary_request(request):
            return text_turn(extractive_summary(request.messages[0].content), usage=(50, 20))
        turn = int(request.metadata["turn"])
        if not str(request.metadata.get("narrative", "")):
            if turn == 1:
                return tool_turn(("delegate", {"agent": "helper", "task": "collect the build facts"}))
            return text_turn(f"root done: {request.messages[-1].content[:80]}")
        if turn - 1 < child_rounds:
            return tool_turn(("echo", {"text": fact(turn)}))
        return text_turn(f"helper done after {turn - 1} rounds")

    return LoopbackProvider([respond], repeat_last=True)


def drive(make_env, provider: LoopbackProvider, policy: CompactionPolicy):
    helper = agent("helper", "echo")
    env = make_env(provider, tools=ToolRegistry([Delegate({"helper": helper}, provider), ECHO]), compaction=policy,
                   bounds=Bounds(max_turns=40))
    return run_turns_keyed(env, request_key="k", content="delegate the collection")


def test_a_sub_agent_compacts_its_own_narrative_never_the_parents(make_env, session):
    provider = tree_model(child_rounds=12)
    result = drive(make_env, provider, SMALL)

    assert isinstance(result.outcome, Completed)
    child_narrative = Frame.objects.get(session=session, depth=1).narrative
    assert child_narrative.startswith("child:helper:")
    rows = list(SessionEvent.objects.filter(session=session, kind=EventKind.COMPACTION).order_by("seq"))
    assert rows, "the child's long narrative crossed the threshold"
    assert {row.narrative for row in rows} == {child_narrative}
    probes = SessionEvent.objects.filter(session=session, kind=EventKind.COMPACTION_PROBE)
    assert {probe.narrative for probe in probes} == {child_narrative} and probes.count() == len(rows)
    # Each compaction covers only the child's own rows.
    for row in rows:
        manifest = row.payload["manifest"]
        covered = SessionEvent.objects.filter(session=session, seq__gte=manifest["first_seq"],
                                              seq__lte=manifest["last_seq"]).exclude(narrative=child_narrative)
        assert not covered.filter(kind__in=["user", "assistant", "tool_result"]).exists()
    exchange = Exchange.objects.get(pk=result.exchange_id)
    store = make_env(provider).store
    assert store.compactions.episode(exchange.session_id, narrative="").compactions == 0  # the parent's quota untouched
    assert store.compactions.episode(exchange.session_id, narrative=child_narrative).compactions == len(rows)
    # The parent's requests never carry a summary; the child's after a compaction open with one.
    root = [r for r in provider.calls if not is_summary_request(r) and not r.metadata.get("narrative")]
    child = [r for r in provider.calls if not is_summary_request(r) and r.metadata.get("narrative") == child_narrative]
    assert not any(isinstance(m, SummaryMessage) for r in root for m in r.messages)
    assert isinstance(child[-1].messages[0], SummaryMessage)
    assert Frame.objects.get(session=session, depth=1).outcome == "completed"
    assert verify_rows(load_session_rows(session.pk)) == []


def test_a_sub_agent_past_its_own_quota_stops_loudly_and_the_parent_goes_on(make_env, session):
    policy = CompactionPolicy(threshold_tokens=300, keep_tokens=200, clear_tool_results_over=400,
                              summary_max_tokens=100, max_per_episode=1)
    provider = tree_model(child_rounds=30)
    result = drive(make_env, provider, policy)

    assert isinstance(result.outcome, Completed), "the child's quota is the child's: the parent answers"
    child_narrative = Frame.objects.get(session=session, depth=1).narrative
    named = SessionEvent.objects.get(session=session, kind=EventKind.COMPACTION_QUOTA)
    assert named.narrative == child_narrative
    assert named.payload == {"name": "compaction_quota_exhausted", "compactions": 1, "max_per_episode": 1}
    kid = Frame.objects.get(session=session, depth=1)
    assert (kid.status, kid.outcome) == ("closed", "budget_exceeded")
    call = ToolCall.objects.get(frame__depth=0, tool="delegate")
    assert call.status == "failed" and "compaction_quota_exhausted" in call.result
    (subagent,) = SessionEvent.objects.filter(session=session, kind=EventKind.SUBAGENT_RESULT)
    assert subagent.payload["outcome"] == "budget_exceeded"
    assert SessionEvent.objects.filter(session=session, kind=EventKind.COMPACTION, narrative="").count() == 0
    assert verify_rows(load_session_rows(session.pk)) == []


def test_a_frame_numbers_its_own_steps_across_a_delegate_and_a_resume(make_env, session):
    """The exchange's turn numbers count a delegate's turns too and go on counting after a park;
    each request also names the frame's own step, which is what a provider that lost the start of
    its exchange to a summary (the playbook) needs."""
    def respond(request: ProviderRequest) -> list[Delta]:
        narrative = str(request.metadata.get("narrative", ""))
        step = int(request.metadata["step"])
        if narrative:
            return tool_turn(("echo", {"text": "kid"})) if step == 1 else text_turn("kid done")
        return {1: lambda: tool_turn(("delegate", {"agent": "helper", "task": "look"})),
                2: lambda: tool_turn(("deploy", {})),
                3: lambda: text_turn("deployed")}[step]()

    provider = LoopbackProvider([respond], repeat_last=True)
    deploy = FunctionTool("deploy", "Deploy.", {"type": "object"}, lambda arguments, context: "deployed")
    tools = ToolRegistry([Delegate({"helper": agent("helper", "echo")}, provider), ECHO, deploy])
    env = make_env(provider, tools=tools, gate=ScriptedGate(require={"deploy"}))
    parked = run_turns_keyed(env, request_key="k", content="look, then deploy")
    assert isinstance(parked.outcome, AwaitingHuman)
    call = ToolCall.objects.select_related("frame").get(exchange_id=parked.exchange_id, tool="deploy")
    result = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")

    assert result.outcome == Completed(answer="deployed")
    root = [(r.metadata["turn"], r.metadata["step"]) for r in provider.calls if not r.metadata.get("narrative")]
    kid = [(r.metadata["turn"], r.metadata["step"]) for r in provider.calls if r.metadata.get("narrative")]
    assert [step for _, step in root] == [1, 2, 3] and [step for _, step in kid] == [1, 2]
    assert root[-1][0] == 5, "the resumed root's turn number counts the delegate's two turns"
