"""Export and propagation: spans reach a real OTLP/HTTP receiver through the SDK's batch processor,
and outbound provider requests carry the turn's ``traceparent``."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.otlp_receiver import OtlpReceiver
from loop import tracing
from loop.cancellation import CancelToken
from loop.driver import run_turns_keyed
from loop.providers.base import ProviderRequest, ToolResultMessage, UserMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.providers.openai_compat import OpenAICompatProvider
from loop.tools.registry import FunctionTool, ToolRegistry
from skald.tracing import configure, endpoint_configured, otel
from tests.loop.conftest import ECHO
from tests.loop.providers.fake_openai_server import FakeOpenAIServer, sse, text_chunks
from tests.loop.test_delegation import TreeProvider
from tests.skald.tracing.test_kernel_spans import CANARY, CONTENT_KEYS

HELLO = ProviderRequest(system="You are terse.", messages=(UserMessage("hello"),))


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.mark.django_db(transaction=True)
def test_a_turn_is_exported_over_otlp_http_to_a_real_receiver(make_env, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "skald-test")
    assert endpoint_configured() and configure()
    try:
        env = make_env(LoopbackProvider([tool_turn(("echo", {"text": "hi"})), text_turn("done")]),
                       tools=ToolRegistry([ECHO]))
        run_turns_keyed(env, request_key="otlp", content="hello")
    finally:
        otel.shutdown()  # flushes the batch

    spans = receiver.received()
    assert {s.name for s in spans} == {"skald.admission", "invoke_agent tester", "chat loopback",
                                       "execute_tool echo"}
    assert {s.service for s in spans} == {"skald-test"} and len({s.trace_id for s in spans}) == 1
    tool = next(s for s in spans if s.name == "execute_tool echo")
    assert tool.attributes["gen_ai.tool.name"] == "echo" and tool.attributes["skald.gate.verdict"] == "allow"
    assert not tracing.enabled
    assert not [(s.name, key) for s in spans for key in s.attributes if key in CONTENT_KEYS]  # off by default


def _leak(arguments, context) -> str:
    return f"the deploy key is {CANARY}, ask carol@example.com"


@pytest.mark.django_db(transaction=True)
def test_with_capture_on_no_secret_reaches_the_wire(make_env, receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("SKALD_OTEL_CAPTURE_CONTENT", "1")

    def script(request: ProviderRequest, n: int):
        if isinstance(request.messages[-1], ToolResultMessage):
            return text_turn(f"The key {CANARY} is not repeated here.")
        return tool_turn(("leak", {"text": f"use {CANARY}"}))

    assert configure()
    try:
        env = make_env(TreeProvider({"": script}), tools=ToolRegistry([FunctionTool("leak", "Leak.", {"type": "object"},
                                                                                    _leak)]))
        run_turns_keyed(env, request_key="canary", content="what is the deploy key? mail bob@example.com")
    finally:
        otel.shutdown()

    spans = receiver.received()
    captured = {key for s in spans for key in s.attributes if key in CONTENT_KEYS}
    assert captured == CONTENT_KEYS  # capture is on: every kind of content was recorded ...
    assert receiver.bodies() and not [b for b in receiver.bodies() if CANARY.encode() in b]  # ... and no secret
    assert not [b for b in receiver.bodies() if b"@example.com" in b]  # PII masked as for a provider


def test_without_an_endpoint_nothing_is_installed(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert not configure() and not tracing.enabled and tracing.tracer is tracing.NOOP
    assert not endpoint_configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})


def test_a_provider_request_carries_the_current_traceparent(
    server: FakeOpenAIServer, make_provider: Callable[..., OpenAICompatProvider]
) -> None:
    server.push(sse(text_chunks("untraced")))
    list(make_provider().stream(HELLO, cancel=CancelToken()))
    assert "traceparent" not in server.requests[-1].headers

    configure(exporter=InMemorySpanExporter())
    try:
        span = tracing.tracer.start("chat skald-test-model", {})
        with tracing.active(span):
            server.push(sse(text_chunks("traced")))
            list(make_provider().stream(HELLO, cancel=CancelToken()))
            expected = span.traceparent()
    finally:
        otel.shutdown()
    assert server.requests[-1].headers["traceparent"] == expected


@pytest.mark.slow
def test_a_django_start_without_an_endpoint_never_imports_the_sdk(tmp_path):
    import subprocess
    import sys

    from skald.core.child_env import hermetic_env

    code = ("import django, sys; django.setup(); import skald.metrics, skald.tasks; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    env = hermetic_env(SKALD_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="skald.settings")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
