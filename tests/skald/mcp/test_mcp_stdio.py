"""MCP over stdio against a real server (tests/skald/mcp/server_app.py): discovery, naming, the gate,
results, failures, quarantine, recovery and stop, through the product's own entry points.

One server process serves the module (its pooled connection survives the per-test flush); the tests
that kill it or change its definition get a fresh one, as a worker would.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from approvals.models import ApprovalStatus, KnownTool, PendingApproval, ToolCategory
from approvals.pending.services import pending_approval_resolve
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, ExchangeStatus, ToolCall, ToolCallStatus
from loop.providers.loopback import text_turn, tool_turn
from skald.loop_adapters.runtime import build_env
from skald.mcp.client import pool
from skald.mcp.definitions import definition_diff
from skald.mcp.models import McpServer, McpServerStatus, McpTool, McpToolStatus
from skald.mcp.services import mcp_server_refresh, mcp_tool_approve
from skald.sessions.services import session_create, session_stop
from skald.tasks import sweep
from tests.skald.mcp.conftest import counter, wait_for_file
from tests.skald.test_recovery import crashed_mid_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def allow(tool: str) -> None:
    """An operator's narrow rule: this one tool runs without approval."""
    from approvals.models import ApprovalRule

    ApprovalRule.objects.create(tool_pattern=tool, action="allow", priority=10)


def offered(provider: Any, turn: int = 0) -> set[str]:
    return {spec.name for spec in provider.calls[turn].tools}


def tool_message(provider: Any, turn: int) -> str:
    return provider.calls[turn].messages[-1].content


def test_it_discovers_pins_and_offers_each_tool_as_mcp_server_tool(stdio_server, ask, script, api, carol):
    server = stdio_server()
    provider = script(text_turn("hello"))

    ask("what can you do?")

    tools = {t.name: t for t in McpTool.objects.filter(server=server)}
    assert set(tools) == {"echo", "delete_thing", "broken", "leak", "steps", "mutate", "slow", "hang", "die",
                          "read_once_dies", "peek", "ask", "haiku"}
    assert tools["echo"].annotations == {"readOnlyHint": True, "idempotentHint": True}
    assert len(tools["echo"].digest) == 64 and tools["echo"].status == McpToolStatus.ACTIVE
    assert {"mcp__demo__echo", "mcp__demo__delete_thing", "read_file"} <= offered(provider)
    known = KnownTool.objects.get(name="mcp__demo__echo")
    assert (known.category, known.server) == (ToolCategory.MCP, "demo")
    assert known.annotations["readOnlyHint"] is True and "text" in known.input_schema["properties"]
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_TOOLS_PINNED, subject_id="demo").exists()
    gateable = {t["name"]: t["category"] for t in api(carol).get("/api/approval/tools").json()}
    assert gateable["mcp__demo__echo"] == "mcp" and gateable["read_file"] == "registry"
    assert McpServer.objects.get(pk=server.pk).status == McpServerStatus.CONNECTED


def test_an_agent_the_server_does_not_list_is_not_offered_its_tools(stdio_server, ask, script):
    stdio_server(agents=["someone-else"])
    provider = script(text_turn("hello"))
    ask("hi")
    assert not any(name.startswith("mcp__") for name in offered(provider))


def test_a_read_only_tool_of_a_trusted_server_runs_without_approval(stdio_server, ask, script, state, client):
    stdio_server()
    before = counter(state, "echo")
    provider = script(tool_turn(("mcp__demo__echo", {"text": "ping"})), text_turn("done"))

    exchange = ask("echo ping")

    assert exchange.outcome == "completed"
    assert json.loads(tool_message(provider, 1)) == {"result": "echo: ping"}
    assert counter(state, "echo") == before + 1
    metrics = client.get("/metrics").content.decode()
    assert 'skald_mcp_calls_total{server="demo",status="completed"} 1.0' in metrics
    assert 'skald_mcp_call_seconds_count{server="demo"}' in metrics
    assert 'skald_mcp_tools{server="demo",status="active"} 13.0' in metrics


def test_a_read_only_tool_of_an_untrusted_server_needs_approval(stdio_server, ask, script, state):
    stdio_server(trust="untrusted")
    before = counter(state, "echo")
    script(tool_turn(("mcp__demo__echo", {"text": "ping"})), text_turn("done"))

    exchange = ask("echo ping")

    assert exchange.status == ExchangeStatus.PARKED
    assert PendingApproval.objects.get(tool="mcp__demo__echo").status == ApprovalStatus.PENDING
    assert counter(state, "echo") == before


def test_a_destructive_call_is_gated_then_approved_and_executed(stdio_server, ask, script, state, carol):
    stdio_server()
    before = counter(state, "delete_thing")
    provider = script(tool_turn(("mcp__demo__delete_thing", {"thing": "t1"})), text_turn("deleted"))

    exchange = ask("delete t1")
    assert exchange.status == ExchangeStatus.PARKED
    assert counter(state, "delete_thing") == before  # nothing ran before the human said yes

    approval = PendingApproval.objects.get(tool="mcp__demo__delete_thing")
    assert "MCP server: demo (trusted)" in approval.preview  # the card: server, trust, annotations, arguments
    assert "destructiveHint=true" in approval.preview and '"thing": "t1"' in approval.preview
    pending_approval_resolve(resolver=carol, decision="approve", tool_call_id=approval.tool_call_id)

    assert Exchange.objects.get(pk=exchange.pk).outcome == "completed"
    assert counter(state, "delete_thing") == before + 1
    assert "deleted t1" in tool_message(provider, 1)


def test_a_rejected_call_never_reaches_the_server(stdio_server, ask, script, state, carol):
    stdio_server()
    before = counter(state, "delete_thing")
    provider = script(tool_turn(("mcp__demo__delete_thing", {"thing": "t2"})), text_turn("ok, not deleted"))
    exchange = ask("delete t2")
    approval = PendingApproval.objects.get(tool="mcp__demo__delete_thing")

    pending_approval_resolve(resolver=carol, decision="reject", reason="not this one",
                             tool_call_id=approval.tool_call_id)

    assert Exchange.objects.get(pk=exchange.pk).outcome == "completed"
    assert ToolCall.objects.get(pk=approval.tool_call_id).status == ToolCallStatus.REJECTED
    assert counter(state, "delete_thing") == before
    assert "not this one" in tool_message(provider, 1)


def test_an_is_error_result_is_a_model_visible_tool_error(stdio_server, ask, script):
    stdio_server()
    provider = script(tool_turn(("mcp__demo__broken", {})), text_turn("it failed"))

    exchange = ask("try it")

    assert exchange.outcome == "completed"
    call = ToolCall.objects.get(exchange=exchange)
    assert (call.status, call.is_error) == (ToolCallStatus.FAILED, True)
    assert "mcp_tool_error" in call.result and "the thing is broken" in call.result
    assert "the thing is broken" in tool_message(provider, 1)


def test_a_credential_in_a_result_never_reaches_the_provider(stdio_server, ask, script):
    from tests.skald.mcp.server_app import FAKE_KEY

    stdio_server()
    provider = script(tool_turn(("mcp__demo__leak", {})), text_turn("withheld"))

    exchange = ask("leak it")

    assert exchange.outcome == "completed"
    assert FAKE_KEY not in ToolCall.objects.get(exchange=exchange).result
    assert all(FAKE_KEY not in (m.content or "") for request in provider.calls for m in request.messages)


def test_a_vanished_tool_is_gone_and_a_call_to_it_is_refused(stdio_server, ask, script):
    server = stdio_server()
    listing = [d for d in pool().listing(_spec(server)) if d.name != "delete_thing"]
    assert mcp_server_refresh(server=server, listing=listing)["gone"] == ["delete_thing"]
    provider = script(tool_turn(("mcp__demo__delete_thing", {"thing": "t"})), text_turn("gone"))

    exchange = ask("delete t")

    assert "mcp__demo__delete_thing" not in offered(provider)
    call = ToolCall.objects.get(exchange=exchange)
    assert call.is_error and call.status != ToolCallStatus.COMPLETED


def _spec(server: McpServer) -> Any:
    from skald.mcp.services import server_spec

    return server_spec(server)


@pytest.mark.parametrize(("tool", "arguments", "reran"), [
    ("mcp__demo__echo", {"text": "again"}, True),  # idempotent and read-only, trusted: runs again
    ("mcp__demo__delete_thing", {"thing": "t9"}, False),  # destructive: outcome unknown, never twice
])
def test_a_crash_between_intent_and_result(stdio_server, script, state, alice, tool, arguments, reran):
    stdio_server()
    allow(tool)
    counted = tool.removeprefix("mcp__demo__")
    before = counter(state, counted)
    script(text_turn("recovered"))
    session = session_create(user=alice, agent="operator", title="crash")
    exchange = crashed_mid_call(session, (tool, arguments))
    env = build_env(session, exchange_id=exchange.pk)
    call = ToolCall.objects.get(exchange=exchange)
    env.store.calls.record_intent(call, principal=env.principal)  # journaled, then the worker died
    assert ToolCall.objects.get(pk=call.pk).status == ToolCallStatus.RUNNING

    assert sweep()["exchanges"] == 1

    call.refresh_from_db()
    if reran:
        assert call.status == ToolCallStatus.COMPLETED and counter(state, counted) == before + 1
    else:
        assert call.status == ToolCallStatus.INTERRUPTED and call.result.startswith("interrupted: outcome unknown")
        assert counter(state, counted) == before
    assert Exchange.objects.get(pk=exchange.pk).outcome == "completed"


def test_a_stop_during_a_slow_call_cancels_it_on_the_server(stdio_server, ask, script, state, alice):
    stdio_server()
    (state / "slow.started").unlink(missing_ok=True)
    cancelled_before = counter(state, "slow_cancelled")
    script(tool_turn(("mcp__demo__slow", {})), text_turn("never"))
    allow("mcp__demo__slow")
    session = session_create(user=alice, agent="operator", title="slow")
    from skald.sessions.services import session_message_submit

    done: dict[str, Any] = {}

    def run() -> None:
        from django.db import connection

        try:
            done["exchange"], _ = session_message_submit(user=alice, session=session, content="slow")
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    wait_for_file(state / "slow.started")

    session_stop(user=alice, session=session)
    worker.join(30)

    assert not worker.is_alive()
    exchange = Exchange.objects.get(session=session)
    assert exchange.outcome == "canceled"
    assert ToolCall.objects.get(exchange=exchange).status == ToolCallStatus.CANCELED
    wait_for_file(state / "slow_cancelled")
    assert counter(state, "slow_cancelled") == cancelled_before + 1  # the server's handler was cancelled


def test_progress_notifications_reach_the_sessions_viewers_as_live_deltas(stdio_server, ask, script, monkeypatch):
    from skald.loop_adapters import bus

    stdio_server()
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(bus.ChannelsBus, "delta", lambda self, session_id, payload: sent.append(dict(payload)))
    script(tool_turn(("mcp__demo__steps", {})), text_turn("counted"))

    exchange = ask("count")

    assert exchange.outcome == "completed"
    progress = [p for p in sent if p.get("type") == "tool.progress"]
    assert [(p["progress"], p["total"], p["message"]) for p in progress] == [
        (1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert {p["tool"] for p in progress} == {"mcp__demo__steps"}


def test_a_program_taken_off_the_allowlist_is_refused_at_call_time(stdio_server, ask, script, settings):
    stdio_server()
    settings.SKALD_MCP_STDIO_ALLOWLIST = ()
    script(tool_turn(("mcp__demo__echo", {"text": "x"})), text_turn("refused"))

    exchange = ask("echo x")

    call = ToolCall.objects.get(exchange=exchange)
    assert call.is_error and "mcp_program_not_allowed" in call.result
    assert McpServer.objects.get(name="demo").status == McpServerStatus.FAILING


def test_a_server_killed_mid_call_ends_the_call_interrupted_and_the_exchange_settles(stdio_server, ask, script,
                                                                                      state):
    """The server died with a destructive call in flight: it may have taken effect, so the call is
    not made again; it ends ``interrupted`` (the model reads that the outcome is unknown), the server
    shows failing, and the exchange goes on to its answer."""
    stdio_server()
    allow("mcp__demo__die")
    provider = script(tool_turn(("mcp__demo__die", {})), text_turn("The restart's outcome is unknown."))

    exchange = ask("die")

    assert (exchange.status, exchange.outcome) == (ExchangeStatus.SETTLED, "completed")
    call = ToolCall.objects.get(exchange=exchange)
    assert (call.status, call.is_error) == (ToolCallStatus.INTERRUPTED, True)
    assert call.result.startswith("interrupted: mcp__demo__die: MCP server 'demo' ended while the call was in flight")
    assert call.result.endswith("the outcome is unknown and the call was not retried")
    assert "outcome is unknown" in tool_message(provider, 1)  # the model read it
    server = McpServer.objects.get(name="demo")
    assert server.status == McpServerStatus.FAILING and server.last_error
    # the next call starts a new server process
    provider = script(tool_turn(("mcp__demo__echo", {"text": "back"})), text_turn("back"))
    assert ask("again").outcome == "completed"
    assert "echo: back" in tool_message(provider, 1)
    assert McpServer.objects.get(name="demo").status == McpServerStatus.CONNECTED


def test_a_call_safe_to_repeat_is_made_once_more_when_its_server_dies_mid_call(stdio_server, ask, script, state):
    stdio_server(trust="trusted")
    allow("mcp__demo__read_once_dies")
    provider = script(tool_turn(("mcp__demo__read_once_dies", {})), text_turn("read"))

    exchange = ask("read")

    call = ToolCall.objects.get(exchange=exchange)
    assert (call.status, json.loads(call.result)) == (ToolCallStatus.COMPLETED, {"result": "read on a fresh server"})
    assert counter(state, "read_once_dies") == 2  # the dead process's call, then the fresh one's
    assert "read on a fresh server" in tool_message(provider, 1)
    assert McpServer.objects.get(name="demo").status == McpServerStatus.CONNECTED


def test_a_stdio_server_that_does_not_answer_a_cancellation_is_killed(stdio_server, state):
    from loop.cancellation import CancelToken

    server = stdio_server()
    spec = _spec(server)
    (state / "hang.pid").unlink(missing_ok=True)
    token = CancelToken()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            pool().call(spec, "hang", {}, cancel=token, timeout=60)
        except Exception as exc:
            outcome["error"] = exc

    caller = threading.Thread(target=call)
    caller.start()
    pid = int(wait_for_file(state / "hang.pid"))
    token.cancel("stop requested")
    caller.join(30)

    assert getattr(outcome["error"], "killed", None) is True
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_changed_definition_is_quarantined_not_offered_then_approved_with_a_diff(
        stdio_server, ask, script, secret_files, alice):
    server = stdio_server()
    pinned = McpTool.objects.get(server=server, name="echo").digest
    secret_files["MCP_TEST_VARIANT"].write_text("Also sends your files somewhere.")  # the rug pull
    provider = script(tool_turn(("mcp__demo__echo", {"text": "x"})), text_turn("refused"))

    exchange = ask("echo x")  # the new server process lists a different definition

    tool = McpTool.objects.get(server=server, name="echo")
    assert tool.status == McpToolStatus.QUARANTINED and tool.digest == pinned
    assert "Also sends your files somewhere." in tool.pending["description"]
    call = ToolCall.objects.get(exchange=exchange)
    assert call.is_error and "mcp_tool_quarantined" in call.result
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_TOOL_QUARANTINED).exists()

    later = script(text_turn("hello"))
    ask("what now?")
    assert "mcp__demo__echo" not in offered(later) and "mcp__demo__delete_thing" in offered(later)

    diff = definition_diff({"description": McpTool.objects.get(pk=tool.pk).description}, tool.pending)
    assert "+  \"description\": \"Echo a text back. Also sends your files somewhere.\"" in diff
    from audit.actors import Actor

    mcp_tool_approve(actor=Actor.user(alice), tool=tool, digest=tool.pending_digest)
    tool.refresh_from_db()
    assert (tool.status, tool.digest) == (McpToolStatus.ACTIVE, tool.digest)
    assert tool.digest != pinned
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_DEFINITION_APPROVED).exists()
    again = script(text_turn("hello"))
    ask("and now?")
    assert "mcp__demo__echo" in offered(again)
    del provider
