"""An MCP call over Streamable HTTP carries the call's trace context (issue 33): the ``tools/call``
request has the W3C ``traceparent`` header (and ``_meta.traceparent``) of its ``execute_tool`` span,
so the server's own spans join the turn's trace."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from audit.actors import Actor
from loop.providers.loopback import text_turn, tool_turn
from skald.mcp.client import pool
from skald.mcp.services import mcp_server_create
from skald.tracing import configure, otel
from tests.skald.mcp.server_app import build

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def traced_app(state: Path) -> Iterator[tuple[str, list[tuple[bytes, str]]]]:
    """The test MCP server behind a recorder of each POST's ``traceparent`` header and body."""
    app = build(state)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY then
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    inner = app.streamable_http_app(transport_security=TransportSecuritySettings(
        allowed_hosts=[f"127.0.0.1:{port}"]))
    seen: list[tuple[bytes, str]] = []

    async def recorder(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        headers = dict(scope["headers"])
        chunks: list[bytes] = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        seen.append((b"".join(chunks), headers.get(b"traceparent", b"").decode()))
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await inner(scope, replay, send)

    server = uvicorn.Server(uvicorn.Config(recorder, log_level="warning", lifespan="off",
                                           timeout_graceful_shutdown=1))
    lifespan = inner.router.lifespan_context(inner)
    import asyncio

    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with lifespan:
                started.set()
                await server.serve(sockets=[sock])

        loop.run_until_complete(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    started.wait(10)
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    yield f"http://127.0.0.1:{port}/mcp", seen
    pool().close("traced")
    server.should_exit = True
    thread.join(10)


@contextmanager
def traced_server(settings: Any, alice: Any, url: str) -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, and the ``traced`` server registered over ``url`` (trusted, every
    agent's); the tracer is shut down when the block ends, so its spans are all finished."""
    exporter = InMemorySpanExporter()
    configure(exporter=exporter)
    try:
        settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/8"
        mcp_server_create(actor=Actor.user(alice), data={
            "name": "traced", "transport": "http", "url": url, "trust": "trusted", "agents": ["*"], "enabled": True})
        yield exporter
    finally:
        otel.shutdown()


def test_an_http_mcp_call_carries_the_calls_traceparent(mcp_setup, settings, alice, traced_app, ask, script):
    with traced_server(settings, alice, traced_app[0]) as exporter:
        script(tool_turn(("mcp__traced__echo", {"text": "follow me"})), text_turn("done"))
        exchange = ask("echo")

    assert exchange.outcome == "completed"
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "execute_tool mcp__traced__echo"]
    assert span.attributes["skald.tool.kind"] == "mcp" and span.attributes["skald.mcp.server"] == "traced"
    assert span.attributes["gen_ai.tool.type"] == "extension"
    expected = f"00-{span.context.trace_id:032x}-{span.context.span_id:016x}-"
    calls = [(body, header) for body, header in traced_app[1] if b'"tools/call"' in body]
    assert calls and all(header.startswith(expected) for _body, header in calls)
    assert all(expected.encode() in body for body, _header in calls)  # _meta.traceparent as well


def test_a_human_decision_is_a_span_linked_to_the_parked_call(mcp_setup, settings, alice, carol, traced_app, ask,
                                                               script):
    from approvals.models import PendingApproval
    from approvals.pending.services import pending_approval_resolve
    from loop.models import Exchange

    with traced_server(settings, alice, traced_app[0]) as exporter:
        script(tool_turn(("mcp__traced__delete_thing", {"thing": "t1"})), text_turn("deleted"))
        parked_exchange = ask("delete t1")
        approval = PendingApproval.objects.get(tool="mcp__traced__delete_thing")
        pending_approval_resolve(resolver=carol, decision="approve", tool_call_id=approval.tool_call_id)

    assert Exchange.objects.get(pk=parked_exchange.pk).outcome == "completed"
    spans = exporter.get_finished_spans()
    parked, resumed = sorted((s for s in spans if s.name == "execute_tool mcp__traced__delete_thing"),
                             key=lambda s: s.start_time)
    assert parked.attributes["skald.gate.verdict"] == "require" and parked.attributes["skald.gate.rule"]
    assert approval.traceparent.startswith(f"00-{parked.context.trace_id:032x}-{parked.context.span_id:016x}-")
    (decision,) = [s for s in spans if s.name == "skald.decision mcp__traced__delete_thing"]
    assert [link.context.span_id for link in decision.links] == [parked.context.span_id]
    assert decision.attributes["skald.decision"] == "approve"
    assert decision.attributes["skald.decision.by"] == f"user:{carol.pk}"
    assert decision.attributes["skald.gate.rule"] == parked.attributes["skald.gate.rule"]
    assert decision.context.trace_id == parked.context.trace_id == resumed.context.trace_id
    assert resumed.attributes["skald.gate.verdict"] == "approved_by_human"
    assert parked.end_time <= decision.start_time <= resumed.start_time
