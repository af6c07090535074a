"""``make run``'s demo: its own MCP server (skald/demo_mcp_server.py, over stdio) attached to the demo
agents; the sre agent's playbook makes one MCP call that is allowed and one that is gated."""

from __future__ import annotations

import sys

import pytest

from approvals.models import ApprovalStatus, PendingApproval
from approvals.rules.seed import default_rules_ensure
from loop.models import ExchangeStatus, ToolCall, ToolCallStatus
from skald.demo import demo_mcp_ensure
from skald.loop_adapters.runtime import set_provider_factory
from skald.mcp import tools_cache
from skald.mcp.models import McpTool
from skald.sessions.services import session_create, session_message_submit

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_the_demo_shows_one_mcp_call_allowed_and_one_gated(alice, settings, tmp_path):
    settings.SKALD_MCP_STDIO_ALLOWLIST = (sys.executable,)
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    settings.SKALD_SYNC_TASKS = True
    set_provider_factory(None)  # the agent's own playbook, as make run plays it
    default_rules_ensure()
    tools_cache.forget()

    assert demo_mcp_ensure() == "demo MCP server: registered and enabled"
    assert set(McpTool.objects.values_list("name", flat=True)) == {"service_status", "restart_service"}

    session = session_create(user=alice, agent="sre", title="checkout")
    exchange, _ = session_message_submit(user=alice, session=session, content="checkout-api is failing")
    exchange.refresh_from_db()

    status, restart = ToolCall.objects.filter(exchange=exchange).order_by("turn", "index")
    assert status.tool == "mcp__demo__service_status" and status.status == ToolCallStatus.COMPLETED
    assert "crash-looping" in status.result
    assert restart.tool == "mcp__demo__restart_service" and restart.status == ToolCallStatus.AWAITING_HUMAN
    assert exchange.status == ExchangeStatus.PARKED
    assert PendingApproval.objects.get(tool_call=restart).status == ApprovalStatus.PENDING
    assert demo_mcp_ensure() == "demo MCP server: already registered"
