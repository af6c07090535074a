"""Traces on the real stack (issue 33): daphne, the qcluster and the sweeper export OTLP/HTTP to a
real receiver on loopback (``bench.otlp_receiver``: protobuf decoded with ``opentelemetry-proto``).

One stack, two conversations on the demo's deterministic playbook:

* the first one's worker is SIGKILLed right after its first message end (a failpoint, once); the
  sweep recovers the turn in another process, and its spans continue the admission's trace;
* the second is a governed run: admission → queue → agent → chat → write_file parked → the
  approver's decision → the resumed write_file → chat, with a sync sub-agent nested under its call
  and an async task whose own trace links to its spawning call.

Content capture is off (the default): no span carries a prompt, a completion, arguments or results,
and a credential posted by a user (refused at admission) appears in no export.
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.e2e.stack import Api, Launch, Stack, wait_for, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("stack_traces")]

_RNG = random.Random(3303)
CANARY = "AK" + "IA" + "".join(_RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
CONTENT_KEYS = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}
TICKET = "Checkout returns 502 after the deploy"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def fired(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fired")  # the failpoint's marker: it fires once, in one process


@pytest.fixture(scope="module")
def stack(launch_stack: Launch, receiver: OtlpReceiver, fired: Path) -> Stack:
    started = launch_stack({
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "skald-e2e",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "SKALD_FAILPOINTS": "loop.after_message_end", "SKALD_FAILPOINTS_ONCE": str(fired),
        "SKALD_LEASE_SECONDS": "2", "SKALD_SWEEP_SECONDS": "1",
    })
    wait_ready(started)
    return started


def in_trace(receiver: OtlpReceiver, trace_id: str) -> list[ReceivedSpan]:
    return [s for s in receiver.received() if s.trace_id == trace_id]


def admission_of(receiver: OtlpReceiver, exchange_id: int) -> ReceivedSpan | None:
    found = [s for s in receiver.received()
             if s.name == "skald.admission" and s.attributes.get("skald.exchange.id") == exchange_id]
    return found[0] if found else None


def approve_write(stack: Stack, operator: Api, session_id: int) -> dict[str, Any]:
    def parked() -> dict[str, Any] | None:
        found = [e for e in operator.events(session_id) if e["kind"] == "control:approval_requested"
                 and e["payload"]["name"] == "write_file"]
        return found[0] if found else None

    approval = wait_for(parked, timeout=120, what="the write_file approval")
    resolved = stack.api("approver").client.post(f"/api/tools/{approval['payload']['tool_call_id']}/resolve",
                                                 json={"decision": "approve", "reason": "fine"})
    assert resolved.status_code == 202, resolved.text
    return approval


def test_a_turn_recovered_after_its_worker_was_killed_continues_the_same_trace(
    stack: Stack, receiver: OtlpReceiver, fired: Path
) -> None:
    operator = stack.api("operator")
    session = operator.create_session()
    posted = operator.send(session["id"], TICKET)
    marker = fired / "loop.after_message_end"
    wait_for(lambda: marker.exists() or None, timeout=120, what="the worker to die at its first message end")
    # Recovered by another process (the sweep, after the lease lapsed): it goes on to the park.
    wait_for(lambda: operator.exchange(session["id"], posted["id"])["status"] == "parked" or None,
             timeout=120, what="the recovered turn to reach its park")
    admission = wait_for(lambda: admission_of(receiver, posted["id"]), timeout=30, what="the admission span")

    def recovered() -> list[ReceivedSpan] | None:
        spans = in_trace(receiver, admission.trace_id)
        names = {s.name for s in spans}
        wanted = {"execute_tool search_knowledge", "execute_tool write_file", "invoke_agent troubleshooter"}
        return spans if wanted <= names else None  # the frame's span ends at the park, exported after it

    spans = wait_for(recovered, timeout=60, what="the recovered turn's spans")
    assert admission.service == "skald-e2e"
    tool = next(s for s in spans if s.name == "execute_tool search_knowledge")
    assert ":t1:" in tool.attributes["gen_ai.tool.call.id"]  # the call the killed worker planned


def test_a_governed_run_is_one_trace_from_admission_to_the_last_chat(stack: Stack, receiver: OtlpReceiver) -> None:
    operator = stack.api("operator")
    refused = operator.post_message(operator.create_session()["id"], f"here is my key {CANARY}")
    assert refused.status_code == 400  # a credential is refused at admission, and reaches no span
    session = operator.create_session()
    posted = operator.send(session["id"], TICKET)
    approval = approve_write(stack, operator, session["id"])
    settled = operator.wait_settled(session["id"], posted["id"], timeout=120)
    assert settled["outcome"] == "completed"
    admission = wait_for(lambda: admission_of(receiver, posted["id"]), timeout=30, what="the admission span")
    trace_id = admission.trace_id

    def complete() -> list[ReceivedSpan] | None:
        spans = in_trace(receiver, trace_id)
        names = [s.name for s in spans]
        return spans if names.count("execute_tool write_file") == 2 and any(
            n.startswith("skald.decision") for n in names) and any(
            s.name == "invoke_agent log-analyst" for s in spans) else None

    spans = wait_for(complete, timeout=60, what="the governed run's spans")
    by_id = {s.span_id: s for s in spans}

    # admission → queue → agent → chat → tool (parked) → decision → resumed tool → chat
    (queue,) = [s for s in spans if s.name == "skald.queue"]
    roots = [s for s in spans if s.name == "invoke_agent troubleshooter"]
    assert queue.parent_span_id == admission.span_id and all(r.parent_span_id == admission.span_id for r in roots)
    first_agent = min(roots, key=lambda s: s.start_ns)
    assert queue.end_ns <= first_agent.start_ns
    chats = sorted((s for s in spans if s.name.startswith("chat ")), key=lambda s: s.start_ns)
    assert chats and chats[0].parent_span_id == first_agent.span_id
    assert chats[0].attributes["gen_ai.operation.name"] == "chat"
    assert {"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
            "gen_ai.response.finish_reasons"} <= set(chats[0].attributes)
    parked, resumed = sorted((s for s in spans if s.name == "execute_tool write_file"), key=lambda s: s.start_ns)
    assert parked.attributes["skald.gate.verdict"] == "require"
    assert parked.attributes["skald.tool.outcome"] == "awaiting_human"
    assert parked.attributes["gen_ai.tool.call.id"] == resumed.attributes["gen_ai.tool.call.id"]
    (decision,) = [s for s in spans if s.name.startswith("skald.decision")]
    assert decision.parent_span_id == admission.span_id
    assert (parked.trace_id, parked.span_id) in decision.links
    assert decision.attributes["skald.decision"] == "approve"
    assert decision.attributes["skald.decision.by"].startswith("user:")
    assert decision.attributes["skald.decision.wait_seconds"] >= 0
    assert parked.end_ns <= decision.start_ns <= resumed.start_ns
    assert resumed.attributes["skald.gate.verdict"] == "approved_by_human"
    assert resumed.attributes["skald.tool.outcome"] == "completed"
    assert any(c.start_ns >= resumed.end_ns for c in chats)  # the model turn after the resumed call
    assert approval["payload"]["tool_call_id"] == resumed.attributes["skald.tool_call.id"]

    # a sync sub-agent nests under its call
    (child,) = [s for s in spans if s.name == "invoke_agent log-analyst"]
    spawning = by_id[child.parent_span_id]
    assert spawning.name == "execute_tool execute_task" and spawning.attributes["skald.tool.kind"] == "subagent"
    assert child.attributes["skald.frame.depth"] == 1

    # an async task: a trace of its own, linked to the call that spawned it
    calls = {(s.trace_id, s.span_id) for s in spans if s.name == "execute_tool execute_task"}

    def task_admission() -> ReceivedSpan | None:
        linked = [s for s in receiver.received() if s.name == "skald.admission" and set(s.links) & calls]
        return linked[0] if linked else None

    task = wait_for(task_admission, timeout=60, what="the async task's admission span")
    assert task.trace_id != trace_id and task.parent_span_id == ""

    # content capture is off by default; the refused credential is nowhere
    everything = receiver.received()
    assert not [(s.name, k) for s in everything for k in s.attributes if k in CONTENT_KEYS]
    assert not [body for body in receiver.bodies() if CANARY.encode() in body]
