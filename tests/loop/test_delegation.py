"""Sub-agents in the kernel (SPEC S1, S2, L10, L12, L15) on the real store, with scripted providers:
depth, capability subtraction, one ledger, one result per child, parallel delegates, one
cancellation tree."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loop.bounds import MAX_AGENT_DEPTH, Bounds
from loop.cancellation import CancelToken
from loop.delegation import ChildRequest, FrameGrant, child_exec_allowlist, child_tool_names, frame_link, run_child
from loop.driver import run_turns_keyed
from loop.errors import ProviderError
from loop.events import EventKind
from loop.models import Exchange, Frame, SessionEvent, ToolCall
from loop.outcomes import BudgetExceeded, Canceled, Completed
from loop.ports import AgentSpec, ToolContext
from loop.providers.base import Delta, ProviderRequest, ToolResultMessage
from loop.providers.loopback import text_turn, tool_turn
from loop.tools.registry import FunctionTool, ToolRegistry
from loop.verify import load_session_rows, verify_rows
from skald.loop_adapters.store import kernel_store
from tests.loop.conftest import ECHO
from tests.strength import examples

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

Script = Callable[[ProviderRequest, int], list[Delta]]


class TreeProvider:
    """Answers each narrative from its own script: ``scripts[agent](request, n)`` for the n-th call
    (0-based) of that narrative; ``""`` is the root. Thread-safe (parallel children)."""

    name = "tree"

    def __init__(self, scripts: Mapping[str, Script],
                 hold: Callable[[ProviderRequest, CancelToken], None] | None = None) -> None:
        self.scripts = scripts
        self.hold = hold
        self.lock = threading.Lock()
        self.seen: dict[str, int] = defaultdict(int)
        self.requests: list[ProviderRequest] = []

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        narrative = str(request.metadata.get("narrative", ""))
        agent = narrative.split(":")[1] if narrative else ""
        with self.lock:
            n = self.seen[narrative]
            self.seen[narrative] += 1
            self.requests.append(request)
        return self._play(request, agent, n, cancel)

    def _play(self, request: ProviderRequest, agent: str, n: int, cancel: CancelToken) -> Iterator[Delta]:
        # A generator, like a real stream: the request is "in flight" once iteration starts.
        if self.hold is not None:
            self.hold(request, cancel)
        if cancel.cancelled:
            raise ProviderError("canceled", code="provider_canceled")
        yield from self.scripts[agent](request, n)


def agent(name: str, *tools: str) -> AgentSpec:
    return AgentSpec(name=name, kind="task", system_prompt=f"You are {name}.", tools=tools, client="")


class Delegate:
    """A kernel-level delegate: the agent catalog is a dict, the provider is given."""

    name = "delegate"
    description = "Run a child agent."
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {"agent": {"type": "string"}, "task": {"type": "string"},
                       "tools": {"type": "array", "items": {"type": "string"}}},
        "required": ["agent", "task"],
    }
    concurrency_safe = True
    restart_hint = "mark_interrupted"
    timeout = None

    def __init__(self, agents: Mapping[str, AgentSpec], provider: Any) -> None:
        self.agents = agents
        self.provider = provider

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> Any:
        link = frame_link(context)
        child = self.agents[arguments["agent"]]
        tools = child_tool_names(link.tools, child.tools, arguments.get("tools"))
        return run_child(link, ChildRequest(agent=child, task=arguments["task"], tools=tools, provider=self.provider,
                                            selection={"rule": "test", "client": "tree"}), context)


def delegate_then_answer(target: str, answer: str = "done") -> Script:
    def script(request: ProviderRequest, n: int) -> list[Delta]:
        if n == 0:
            return tool_turn(("delegate", {"agent": target, "task": f"work for {target}"}))
        last = request.messages[-1]
        return text_turn(f"{answer}: {last.content[:60]}")

    return script


def answer(text: str) -> Script:
    return lambda request, n: text_turn(text)


def env_for(make_env, provider, agents: Mapping[str, AgentSpec], *extra: Any, bounds: Bounds | None = None):
    delegate = Delegate(agents, provider)
    env = make_env(provider, tools=ToolRegistry([delegate, ECHO, *extra]), bounds=bounds)
    return env


def events(session, *kinds: str) -> list[SessionEvent]:
    rows = SessionEvent.objects.filter(session=session).order_by("seq")
    return list(rows.filter(kind__in=kinds)) if kinds else list(rows)


def test_it_allows_depth_five_and_refuses_the_sixth_level(make_env, session):
    deep = agent("deep", "delegate", "echo")
    provider = TreeProvider({"": delegate_then_answer("deep"), "deep": delegate_then_answer("deep", "level")})
    result = run_turns_keyed(env_for(make_env, provider, {"deep": deep}), request_key="k", content="go deep")

    assert isinstance(result.outcome, Completed)
    depths = sorted(Frame.objects.filter(session=session).values_list("depth", flat=True))
    assert depths == [0, 1, 2, 3, 4, 5] and MAX_AGENT_DEPTH == 5
    deepest = Frame.objects.get(session=session, depth=5)
    refused = ToolCall.objects.get(frame=deepest, tool="delegate")
    assert refused.is_error and "max_agent_depth" in refused.result  # a typed error the model reads
    assert "(max_agent_depth)" in provider.requests[-1].messages[-1].content
    # Exactly one subagent_result per child, in its parent's narrative; every frame closed.
    results = events(session, EventKind.SUBAGENT_RESULT)
    assert len(results) == 5 and sorted(r.payload["depth"] for r in results) == [1, 2, 3, 4, 5]
    assert set(Frame.objects.filter(session=session, depth__gt=0).values_list("status", flat=True)) == {"closed"}
    assert verify_rows(load_session_rows(session.pk)) == []


@settings(max_examples=examples(1000))
@given(parent=st.sets(st.sampled_from(["a", "b", "c", "d", "echo"]), max_size=5),
       declared=st.sets(st.sampled_from(["a", "b", "c", "d", "echo", "z"]), max_size=6),
       requested=st.none() | st.sets(st.sampled_from(["a", "b", "c", "echo", "y"]), max_size=5))
def test_child_tools_are_the_intersection_never_more(parent, declared, requested):
    names = child_tool_names(sorted(parent), sorted(declared), None if requested is None else sorted(requested))
    assert set(names) <= parent and set(names) <= declared
    assert requested is None or set(names) <= requested
    assert set(names) == parent & declared & (parent if requested is None else requested)


@settings(max_examples=examples(1000))
@given(parent=st.none() | st.lists(st.sampled_from(["ls", "cat", "grep", "git"]), unique=True),
       asked=st.none() | st.lists(st.sampled_from(["ls", "cat", "rm", "curl"]), unique=True))
def test_a_childs_process_grant_is_its_parents_narrowed_by_its_ask_never_more(parent, asked):
    granted = child_exec_allowlist(parent, asked)
    if asked is None:
        assert granted == (None if parent is None else tuple(parent))  # no ask: the parent's
    elif parent is None:
        assert granted == tuple(asked)  # unnarrowed parent: the tool still bounds it by the deployment's
    else:
        assert set(granted or ()) == set(parent) & set(asked)
    if parent is not None and asked is not None and not set(parent) & set(asked):
        assert granted == ()  # a disjoint ask leaves no process grant at all


def test_a_grant_is_read_back_as_recorded():
    grant = FrameGrant(tools=("a", "b"), exec_allowlist=("cat",))
    assert FrameGrant.recorded(grant.record()) == grant
    assert FrameGrant.recorded({"tools": ["a"]}) == FrameGrant(tools=("a",), exec_allowlist=None)


def _noop(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return "ok"


EXTRA = {name: FunctionTool(name, f"tool {name}", {"type": "object"}, _noop) for name in ("a", "b", "c")}


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parent=st.sets(st.sampled_from(["a", "b", "c"])), declared=st.sets(st.sampled_from(["a", "b", "c", "z"])),
       requested=st.none() | st.lists(st.sampled_from(["a", "b", "c", "x"]), unique=True))
def test_a_child_is_offered_only_a_subset_of_its_parents_tools(make_env, session, parent, declared, requested):
    child = agent("kid", *declared, "delegate")
    call = {"agent": "kid", "task": "t", **({} if requested is None else {"tools": requested})}
    provider = TreeProvider({"": lambda r, n: tool_turn(("delegate", call)) if n == 0 else text_turn("ok"),
                             "kid": answer("kid done")})
    env = env_for(make_env, provider, {"kid": child}, *(EXTRA[name] for name in sorted(parent)))
    key = f"k{len(Exchange.objects.filter(session=session))}"
    assert isinstance(run_turns_keyed(env, request_key=key, content="go").outcome, Completed)
    root_tools = {spec.name for spec in provider.requests[0].tools}
    kid_tools = {spec.name for spec in provider.requests[1].tools}
    assert kid_tools <= root_tools
    assert kid_tools <= set(declared) | {"delegate"}
    assert requested is None or kid_tools <= set(requested)


def test_one_ledger_a_childs_usage_is_the_roots_and_an_overspend_stops_the_tree(make_env, session):
    kid = agent("kid", "echo")
    provider = TreeProvider({"": delegate_then_answer("kid"),
                             "kid": lambda r, n: tool_turn(("echo", {"text": str(n)}), usage=(10, 5))})
    env = env_for(make_env, provider, {"kid": kid}, bounds=Bounds(budget_tokens=40))
    result = run_turns_keyed(env, request_key="k", content="spend")

    assert isinstance(result.outcome, BudgetExceeded)
    exchange = Exchange.objects.get(session=session)
    # Root turn (15) + two child turns (15 each): the child's spend is on the root's one ledger.
    assert exchange.reserved_tokens == 45 and exchange.input_tokens == 30 and exchange.output_tokens == 15
    kid_frame = Frame.objects.get(session=session, depth=1)
    assert kid_frame.outcome == "budget_exceeded"
    (summary,) = events(session, EventKind.SUBAGENT_RESULT)
    assert summary.payload["outcome"] == "budget_exceeded" and summary.payload["input_tokens"] == 20
    assert ToolCall.objects.get(frame__depth=0, tool="delegate").status == "failed"


def test_two_parallel_delegates_run_concurrently_and_record_in_call_order(make_env, session):
    both_in_flight = threading.Barrier(2, timeout=10)

    def hold(request: ProviderRequest, cancel: CancelToken) -> None:
        narrative = str(request.metadata.get("narrative", ""))
        if narrative.startswith("child:") and not any(isinstance(m, ToolResultMessage) for m in request.messages):
            both_in_flight.wait()  # neither child's first call returns until both are in flight

    two = lambda r, n: (tool_turn(("delegate", {"agent": "left", "task": "l"}),  # noqa: E731
                                  ("delegate", {"agent": "right", "task": "r"})) if n == 0 else text_turn("both"))
    provider = TreeProvider({"": two, "left": answer("left answer"), "right": answer("right answer")}, hold=hold)
    env = env_for(make_env, provider, {"left": agent("left"), "right": agent("right")})
    assert isinstance(run_turns_keyed(env, request_key="k", content="fan out").outcome, Completed)

    results = [e for e in events(session, EventKind.TOOL_RESULT) if e.narrative == ""]
    assert [r.payload["key"] for r in results] == ["e1:t1:c0", "e1:t1:c1"]  # call order, not finish order
    assert [r.payload["content"] for r in results] == ["left answer", "right answer"]
    summaries = events(session, EventKind.SUBAGENT_RESULT)
    assert [s.payload["agent"] for s in summaries] == ["left", "right"]
    assert verify_rows(load_session_rows(session.pk)) == []


def test_siblings_share_the_scratchpad_last_writer_wins(make_env, session):
    def write(value: str) -> Script:
        return lambda r, n: (tool_turn(("scratch", {"v": value})) if n == 0 else text_turn(value))

    def scratch(arguments: Mapping[str, Any], context: ToolContext) -> str:
        kernel_store().scratchpad_set(context.scope.session_id, "shared", arguments["v"],
                                      principal=context.scope.principal)
        return "stored"

    tool = FunctionTool("scratch", "write", {"type": "object"}, scratch)
    first = lambda r, n: tool_turn(("delegate", {"agent": "one", "task": "1"})) if n == 0 else (  # noqa: E731
        tool_turn(("delegate", {"agent": "two", "task": "2"})) if n == 1 else text_turn("ok"))
    provider = TreeProvider({"": first, "one": write("from one"), "two": write("from two")})
    env = env_for(make_env, provider, {"one": agent("one", "scratch"), "two": agent("two", "scratch")}, tool)
    run_turns_keyed(env, request_key="k", content="pad")
    assert kernel_store().scratchpad_get(session.pk, "shared") == "from two"


def test_a_stop_during_a_grandchilds_provider_call_cancels_the_whole_tree(make_env, session):
    entered, done = threading.Event(), threading.Event()

    def hold(request: ProviderRequest, cancel: CancelToken) -> None:
        if str(request.metadata.get("narrative", "")).startswith("child:grandkid:"):
            entered.set()
            cancel.wait(30)  # the in-flight provider call: only the stop ends it

    provider = TreeProvider({"": delegate_then_answer("kid"), "kid": delegate_then_answer("grandkid"),
                             "grandkid": answer("never")}, hold=hold)
    env = env_for(make_env, provider, {"kid": agent("kid", "delegate"), "grandkid": agent("grandkid")})
    env.cancel_poll_interval = 0.05
    box: dict[str, Any] = {}

    def drive() -> None:
        from django.db import connection

        try:
            box["result"] = run_turns_keyed(env, request_key="k", content="go")
        finally:
            connection.close()
            done.set()

    worker = threading.Thread(target=drive)
    worker.start()
    assert entered.wait(20)
    exchange = Exchange.objects.get(session=session)
    kernel_store().exchanges.request_cancel(exchange.pk, principal="user:1")
    assert done.wait(20)
    worker.join()

    assert isinstance(box["result"].outcome, Canceled)
    assert len(provider.requests) == 3  # root, child, grandchild: nothing dispatched after the stop
    frames = Frame.objects.filter(session=session).order_by("depth")
    assert [(f.depth, f.status, f.outcome) for f in frames] == [(0, "closed", "canceled"), (1, "closed", "canceled"),
                                                               (2, "closed", "canceled")]
    assert set(ToolCall.objects.filter(session=session).values_list("status", flat=True)) == {"canceled"}
    rows = events(session)
    last_assistant = max(e.seq for e in rows if e.kind == EventKind.ASSISTANT)
    grandkid_closed = next(e.seq for e in rows if e.kind == EventKind.FRAME_CLOSED and e.payload["depth"] == 2)
    assert last_assistant < grandkid_closed  # no model turn after the stop reached the grandchild
    assert [e.payload["outcome"] for e in rows if e.kind == EventKind.SUBAGENT_RESULT] == ["canceled", "canceled"]
    assert rows[-1].kind == EventKind.EXCHANGE_SETTLED and rows[-1].payload["outcome"] == "canceled"
