"""The kernel's spans through Skald's OpenTelemetry tracer, recorded by the SDK's in-memory exporter:
names, parents, links and GenAI semantic-convention attributes of each span kind (issue 33).

Real kernel turns on the real store, driven by the loopback provider; only the exporter is in memory.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loop import tracing
from loop.context import ContextBuilder
from loop.driver import admit_exchange, drive_exchange, run_turns_keyed
from loop.models import Exchange, ToolCall, ToolCallStatus
from loop.outcomes import AwaitingHuman, Completed
from loop.ports import ToolContext
from loop.providers.base import ProviderRequest, ToolResultMessage, fold_deltas
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.recovery import recover_exchange, resolve_pending
from loop.tools.registry import FunctionTool, ToolRegistry
from skald.tracing import configure, otel
from tests.loop.compaction.conftest import SMALL, scripted_model
from tests.loop.conftest import ECHO
from tests.loop.fakes import ScriptedGate
from tests.loop.test_delegation import Delegate, TreeProvider, agent
from tests.skald.tracing.conftest import recorded

pytestmark = [pytest.mark.django_db(transaction=True)]

_RNG = random.Random(33)
CANARY = "AK" + "IA" + "".join(_RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def one(exporter: InMemorySpanExporter, prefix: str) -> ReadableSpan:
    (found,) = named(exporter, prefix)
    return found


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return dict(span.attributes or {})


def test_a_turn_with_a_tool_is_one_trace_under_its_admission(make_env, spans):
    provider = LoopbackProvider([tool_turn(("echo", {"text": "hi"})), text_turn("done")])
    env = make_env(provider, tools=ToolRegistry([ECHO]))

    result = run_turns_keyed(env, request_key="k1", content="say hi")

    assert result.outcome == Completed(answer="done")
    admission, agent_span = one(spans, "skald.admission"), one(spans, "invoke_agent tester")
    chats, tool = named(spans, "chat "), one(spans, "execute_tool echo")
    assert len(chats) == 2 and {s.context.trace_id for s in spans.get_finished_spans()} == {admission.context.trace_id}
    assert parent_of(agent_span) == admission.context.span_id
    assert {parent_of(c) for c in chats} == {parent_of(tool)} == {agent_span.context.span_id}
    exchange = Exchange.objects.get(pk=result.exchange_id)
    assert exchange.traceparent.startswith(f"00-{admission.context.trace_id:032x}-{admission.context.span_id:016x}-")
    assert attrs(agent_span).items() >= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "tester",
                                      "gen_ai.conversation.id": str(exchange.session_id),
                                      "skald.frame.depth": 0, "skald.outcome": "completed"}.items()
    first = attrs(chats[0])
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.provider.name"] == "loopback"
    assert first["gen_ai.request.model"] == first["gen_ai.response.model"] == "loopback"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert isinstance(first["gen_ai.usage.input_tokens"], int) and isinstance(first["gen_ai.usage.output_tokens"], int)
    call = ToolCall.objects.get(exchange_id=exchange.pk)
    assert attrs(tool) == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
                           "gen_ai.tool.call.id": call.call_key, "gen_ai.tool.type": "function",
                           "skald.tool.kind": "builtin", "skald.tool_call.id": call.pk, "skald.gate.verdict": "allow",
                           "skald.tool.outcome": "completed"}
    assert all(key not in attrs(s) for s in spans.get_finished_spans() for key in CONTENT_KEYS)  # capture is off


def test_the_queue_wait_is_a_span_from_admission_to_the_claim(make_env, spans, clock):
    env = make_env(LoopbackProvider([text_turn("ok")]))
    exchange, _ = admit_exchange(env, request_key="queued", content="hello")  # no claim: a worker will take it
    clock.advance(4)

    drive_exchange(env, Exchange.objects.get(pk=exchange.pk), claim_token="worker")

    queue = one(spans, "skald.queue")
    assert parent_of(queue) == one(spans, "skald.admission").context.span_id
    assert queue.end_time - queue.start_time >= 4_000_000_000  # the stepping clock's four seconds
    assert parent_of(one(spans, "invoke_agent")) == one(spans, "skald.admission").context.span_id


def test_a_parked_call_ends_its_span_at_the_park_and_the_resumed_call_continues_the_trace(make_env, spans):
    gate = ScriptedGate(require={"echo"})
    env = make_env(LoopbackProvider([tool_turn(("echo", {"text": "hi"})), text_turn("after")]),
                   tools=ToolRegistry([ECHO]), gate=gate)
    parked = run_turns_keyed(env, request_key="p1", content="please")
    assert isinstance(parked.outcome, AwaitingHuman)
    (waiting,) = named(spans, "execute_tool echo")
    assert attrs(waiting)["skald.gate.verdict"] == "require"
    assert attrs(waiting)["skald.tool.outcome"] == "awaiting_human"
    trace_id = waiting.context.trace_id
    spans.clear()

    call = ToolCall.objects.get(exchange_id=parked.exchange_id)
    resumed = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")

    assert resumed.outcome == Completed(answer="after")
    again = one(spans, "execute_tool echo")
    assert attrs(again)["skald.gate.verdict"] == "approved_by_human"
    assert attrs(again)["skald.tool.outcome"] == "completed"
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {trace_id}
    assert named(spans, "chat ")


def test_a_sync_sub_agent_nests_under_its_call(make_env, spans):
    agents = {"helper": agent("helper", "echo")}
    scripts = {"": lambda r, n: (tool_turn(("delegate", {"agent": "helper", "task": "help"})) if n == 0
                                else text_turn("root done")),
               "helper": lambda r, n: text_turn("helped")}
    provider = TreeProvider(scripts)
    delegate = Delegate(agents, provider)
    env = make_env(provider, tools=ToolRegistry([delegate, ECHO]))

    result = run_turns_keyed(env, request_key="d1", content="delegate it")

    assert result.outcome == Completed(answer="root done")
    call = one(spans, "execute_tool delegate")
    child = one(spans, "invoke_agent helper")
    assert parent_of(child) == call.context.span_id
    assert attrs(child)["skald.frame.depth"] == 1
    (child_chat,) = [c for c in named(spans, "chat ") if parent_of(c) == child.context.span_id]
    assert child_chat.context.trace_id == call.context.trace_id


def test_a_worker_that_recovers_a_crashed_turn_continues_its_trace(make_env, spans, clock):
    env = make_env(LoopbackProvider([text_turn("recovered")]), tools=ToolRegistry([ECHO]))
    exchange, _ = admit_exchange(env, request_key="crash", content="go", claim_token="dead-worker")
    frame = env.store.exchanges.root_frame(exchange)
    env.store.exchanges.record_message_end(exchange=exchange, frame=frame, turn=1,
                                           assembled=fold_deltas(tool_turn(("echo", {"text": "x"}))),
                                           principal=env.principal, spent_tokens=0, journal=1)
    trace_id = one(spans, "skald.admission").context.trace_id
    otel.shutdown()  # the first worker is gone with its tracer; another process starts its own
    later = InMemorySpanExporter()
    configure(exporter=later, capture=False)
    clock.advance(31)

    result = recover_exchange(make_env(LoopbackProvider([text_turn("recovered")]), tools=ToolRegistry([ECHO])),
                              exchange.pk, claim_token="rescuer")

    assert result.outcome == Completed(answer="recovered")
    finished = later.get_finished_spans()
    assert {s.name for s in finished} >= {"execute_tool echo", "invoke_agent tester", "chat loopback"}
    assert {s.context.trace_id for s in finished} == {trace_id}


def _leaky(arguments: Mapping[str, Any], context: ToolContext) -> str:
    return f"the key is {CANARY}"


@pytest.fixture
def captured() -> Iterator[InMemorySpanExporter]:
    with recorded(capture=True) as exporter:
        yield exporter


def test_content_capture_records_screened_text_and_never_a_secret(make_env, captured):
    spans = captured

    def script(request: ProviderRequest, n: int):
        if isinstance(request.messages[-1], ToolResultMessage):
            return text_turn(f"I will not repeat {CANARY}; mail bob@example.com")
        return tool_turn(("leak", {"text": CANARY}))

    leak = FunctionTool("leak", "Return a secret.", {"type": "object"}, _leaky)
    env = make_env(TreeProvider({"": script}), tools=ToolRegistry([leak]))

    run_turns_keyed(env, request_key="c1", content="show me the key, mail alice@example.com")

    everything = [(s.name, key, str(value)) for s in spans.get_finished_spans()
                  for key, value in attrs(s).items()]
    assert not [item for item in everything if CANARY in item[2]]
    assert not [item for item in everything if "@example.com" in item[2]]  # masked like provider input
    recorded = {key for _name, key, _value in everything}
    assert {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result"} <= recorded
    inputs = [v for _n, k, v in everything if k == "gen_ai.input.messages"]
    assert any("[email]" in v for v in inputs)


def test_tracing_off_installs_nothing_and_stores_no_traceparent(make_env):
    assert not tracing.enabled and not configure(env={})
    env = make_env(LoopbackProvider([text_turn("quiet")]))
    result = run_turns_keyed(env, request_key="off", content="hello")
    assert Exchange.objects.get(pk=result.exchange_id).traceparent == ""


def test_an_admission_refused_for_a_credential_records_an_error_span(make_env, spans):
    env = make_env(LoopbackProvider([text_turn("never")]))
    with pytest.raises(Exception, match="credential"):
        admit_exchange(env, request_key="bad", content=f"my key {CANARY}")
    refused = one(spans, "skald.admission")
    assert refused.status.status_code.name == "ERROR"
    assert CANARY not in str(attrs(refused))


def test_a_denied_call_says_so(make_env, spans):
    env = make_env(LoopbackProvider([tool_turn(("echo", {"text": "no"})), text_turn("ok")]),
                   tools=ToolRegistry([ECHO]), gate=ScriptedGate(deny={"echo"}))
    run_turns_keyed(env, request_key="deny", content="try")
    denied = one(spans, "execute_tool echo")
    assert attrs(denied)["skald.gate.verdict"] == "deny"
    assert attrs(denied)["skald.tool.outcome"] == ToolCallStatus.REJECTED


def test_a_compaction_is_a_span_with_its_probe_score(make_env, spans):
    env = make_env(scripted_model(), compaction=SMALL, context=ContextBuilder())
    for number in range(1, 6):
        run_turns_keyed(env, request_key=f"c{number}", content=f"check {number}")

    compactions = named(spans, "skald.compaction")
    assert compactions
    first = attrs(compactions[0])
    assert first["skald.compaction.reason"] == "tokens" and first["skald.compaction.covered_rows"] > 0
    assert 0 <= first["skald.compaction.probe_score"] <= 1
    assert first["skald.compaction.probe_result"] in {"ok", "no_signal", "degraded"}
    agents = {s.context.span_id for s in named(spans, "invoke_agent")}
    assert all(parent_of(c) in agents for c in compactions)
