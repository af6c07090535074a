"""Content capture on the real stack (issue 33): with ``SKALD_OTEL_CAPTURE_CONTENT=1`` daphne, the
qcluster and the sweeper record prompts, completions, tool arguments and results, and still no
secret reaches the receiver (``bench.otlp_receiver``: protobuf decoded with ``opentelemetry-proto``).

A stack of its own (capture is a process setting; ``test_stack_traces`` checks the default, off).
One governed run carries two canaries: an e-mail address in the user's message (masking replaces
it) and an AWS key in the case log that the sub-agent's ``read_logs`` returns (the credential
tripwires withhold it). Content attributes are present — so the check cannot pass by recording
nothing — and neither canary is in any span attribute, nor anywhere in the bytes that arrived.
(On this path the kernel masks and withholds both before the span's own screen sees them; the
span screen's own work is checked in process, ``tests/skald/tracing/test_kernel_spans.py``.)
"""

from __future__ import annotations

import random
import string
from collections.abc import Iterator
from typing import Any

import pytest

from bench.otlp_receiver import OtlpReceiver, ReceivedSpan
from tests.e2e.stack import Launch, Stack, wait_for, wait_ready
from tests.e2e.test_stack_traces import CONTENT_KEYS, TICKET, admission_of, approve_write, in_trace

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.xdist_group("stack_traces_capture")]

_RNG = random.Random(3304)
AWS_KEY = "AK" + "IA" + "".join(_RNG.choice(string.ascii_uppercase + "234567") for _ in range(16))
EMAIL = "canary-" + "".join(_RNG.choice(string.ascii_lowercase) for _ in range(12)) + "@example.com"


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def stack(launch_stack: Launch, receiver: OtlpReceiver) -> Stack:
    started = launch_stack({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": "skald-e2e",
                            "OTEL_BSP_SCHEDULE_DELAY": "100", "SKALD_OTEL_CAPTURE_CONTENT": "1"})
    wait_ready(started)
    return started


def values(value: Any) -> Iterator[str]:
    """Every string inside an attribute's value (arrays and maps included)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from values(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from values(item)


def test_with_capture_on_content_is_recorded_and_no_canary_reaches_a_span(stack: Stack, receiver: OtlpReceiver
                                                                          ) -> None:
    operator = stack.api("operator")
    case = operator.client.post("/api/cases/", json={
        "title": "checkout 502", "logs": [{"name": "deploy.log", "content": f"ERROR 502 upstream; "
                                           f"AWS_ACCESS_KEY_ID={AWS_KEY} loaded from env\n"}]})
    assert case.status_code == 201, case.text
    created = operator.client.post("/api/sessions/", json={"agent": "troubleshooter", "case": case.json()["id"]})
    assert created.status_code == 201, created.text
    session_id = created.json()["id"]
    posted = operator.send(session_id, f"{TICKET}; reach me at {EMAIL}")
    approve_write(stack, operator, session_id)
    assert operator.wait_settled(session_id, posted["id"], timeout=120)["outcome"] == "completed"
    admission = wait_for(lambda: admission_of(receiver, posted["id"]), timeout=30, what="the admission span")

    def complete() -> list[ReceivedSpan] | None:
        spans = in_trace(receiver, admission.trace_id)
        names = [s.name for s in spans]
        return spans if "execute_tool read_logs" in names and names.count("execute_tool write_file") == 2 and any(
            n.startswith("chat ") and s.start_ns > max(w.end_ns for w in spans if w.name == "execute_tool write_file")
            for s in spans for n in [s.name]) else None

    spans = wait_for(complete, timeout=60, what="the run's spans, up to the chat after the resumed write_file")

    # content is recorded: the prompts, the completions, the arguments and the results
    recorded = {key for s in spans for key in s.attributes if key in CONTENT_KEYS}
    assert recorded == CONTENT_KEYS
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert any("[email]" in s.attributes.get("gen_ai.input.messages", "") for s in chats)  # masked, not dropped
    (logs,) = [s for s in spans if s.name == "execute_tool read_logs"]
    assert logs.attributes["gen_ai.tool.call.result"]  # the log's result is there, with the key withheld
    assert logs.attributes.get("skald.tool.withheld")  # the credential tripwires caught the key

    # and no canary anywhere: no attribute of any span of any trace, no byte of any request
    everywhere = receiver.received()
    for canary in (AWS_KEY, EMAIL):
        assert not [(s.name, key) for s in everywhere for key, value in s.attributes.items()
                    if any(canary in text for text in values(value))], canary
        assert not [body for body in receiver.bodies() if canary.encode() in body], canary
