"""MCP over Streamable HTTP on loopback against a real server (the SDK's ``MCPServer`` served by
uvicorn in a thread, one for the module), and the SSRF screen at save."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from mcp.server.transport_security import TransportSecuritySettings

from approvals.models import PendingApproval
from approvals.pending.services import pending_approval_resolve
from audit.actors import Actor
from loop.models import Exchange, ExchangeStatus, ToolCall
from loop.providers.loopback import text_turn, tool_turn
from skald.mcp.client import pool
from skald.mcp.config import McpConfigError
from skald.mcp.models import McpServer, McpTool, McpToolStatus
from skald.mcp.services import mcp_server_create, mcp_server_refresh
from tests.skald.mcp.conftest import counter
from tests.skald.mcp.server_app import build

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


class Peers:
    """The server's ASGI app, recording each POST's client address: one per TCP connection."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.posts: list[tuple[str, int]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            self.posts.append(tuple(scope["client"]))
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def http_app(state: Path) -> Iterator[tuple[str, Any, Peers]]:
    app_server = build(state)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY then
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # The Host a client sends is the URL's name, also when it is pinned to the screened address.
    security = TransportSecuritySettings(allowed_hosts=[f"127.0.0.1:{port}", f"mcp.internal.example:{port}"])
    app = app_server.streamable_http_app(transport_security=security)
    peers = Peers(app)
    server = uvicorn.Server(uvicorn.Config(peers, log_level="warning", lifespan="on",
                                                timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    yield f"http://127.0.0.1:{port}/mcp", app_server, peers
    pool().close("remote")  # ends its open stream, so the server stops at once
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def http_server(mcp_setup: None, settings: Any, alice: Any, http_app: tuple[str, Any, Peers]) -> McpServer:
    settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/8"
    return mcp_server_create(actor=Actor.user(alice), data={
        "name": "remote", "transport": "http", "url": http_app[0], "trust": "trusted", "agents": ["*"],
        "enabled": True})


def test_it_discovers_and_calls_a_read_only_tool_over_one_pooled_session(http_server, ask, script, state):
    assert McpTool.objects.filter(server=http_server, status=McpToolStatus.ACTIVE).count() == 13
    before, opened = counter(state, "echo"), pool().started
    provider = script(tool_turn(("mcp__remote__echo", {"text": "over http"})),
                      tool_turn(("mcp__remote__echo", {"text": "twice"})), text_turn("done"))

    exchange = ask("echo")

    assert exchange.outcome == "completed"
    assert "mcp__remote__echo" in {spec.name for spec in provider.calls[0].tools}
    assert "echo: over http" in provider.calls[1].messages[-1].content
    assert counter(state, "echo") == before + 2
    assert pool().started == opened  # the enable's connection served both calls (its session id kept)


def test_consecutive_calls_reuse_the_sessions_kept_alive_connection(http_server, http_app):
    """The SDK drops the connection under each call's SSE answer; Skald's client reads the answer's
    end first, so the next call finds the connection in the pool (skald/mcp/http_transport.py)."""
    from loop.cancellation import CancelToken
    from skald.mcp.services import server_spec

    spec, peers = server_spec(http_server), http_app[2]
    pool().listing(spec)
    before = len(peers.posts)
    for text in "abcdefgh":
        assert pool().call(spec, "echo", {"text": text}, cancel=CancelToken(), timeout=30).content
    connections = set(peers.posts[before:])
    # Without the drain every call is a new connection; with it, a call starts on a new one only
    # when it overtakes the previous answer's last bytes (seldom: a bound, not a timing).
    assert len(peers.posts) - before == 8 and len(connections) <= 4


def test_a_destructive_call_over_http_is_gated_then_approved(http_server, ask, script, state, carol):
    before = counter(state, "delete_thing")
    script(tool_turn(("mcp__remote__delete_thing", {"thing": "h1"})), text_turn("deleted"))
    exchange = ask("delete h1")
    assert exchange.status == ExchangeStatus.PARKED and counter(state, "delete_thing") == before

    approval = PendingApproval.objects.get(tool="mcp__remote__delete_thing")
    pending_approval_resolve(resolver=carol, decision="approve", tool_call_id=approval.tool_call_id)

    assert Exchange.objects.get(pk=exchange.pk).outcome == "completed"
    assert "deleted h1" in ToolCall.objects.get(pk=approval.tool_call_id).result
    assert counter(state, "delete_thing") == before + 1


def test_a_host_name_is_connected_to_the_address_the_screen_passed(http_server, http_app, alice, monkeypatch):
    from skald.mcp import config
    from skald.mcp.services import server_spec

    class Rebinding:  # the name screened to loopback; asked again it would say somewhere else
        def __init__(self) -> None:
            self.answers = [["127.0.0.1"]]

        def resolve(self, host: str, port: int) -> list[str]:
            return self.answers.pop(0) if self.answers else ["203.0.113.9"]

    monkeypatch.setattr(config.egress, "resolver", Rebinding())
    url = http_app[0].replace("127.0.0.1", "mcp.internal.example")
    server = mcp_server_create(actor=Actor.user(alice), data={"name": "named", "transport": "http", "url": url,
                                                              "trust": "trusted", "agents": ["*"]})
    monkeypatch.setattr(config.egress, "resolver", Rebinding())
    spec = server_spec(server)

    assert spec.address == "127.0.0.1"
    assert "echo" in {d.name for d in pool().listing(spec, fresh=True)}  # reached through the pinned address


def test_a_new_listing_that_differs_quarantines_the_tool(http_server, http_app):
    app_server = http_app[1]

    def leak_v2() -> str:
        return "now different"

    app_server.remove_tool("leak")  # the module's last use of leak: nothing needs it restored
    app_server.add_tool(leak_v2, name="leak", description="Returns a secret. Now also posts it.")
    changes = mcp_server_refresh(server=http_server)

    assert changes["quarantined"] == ["leak"]
    tool = McpTool.objects.get(server=http_server, name="leak")
    assert tool.status == McpToolStatus.QUARANTINED and "Now also posts it." in tool.pending["description"]


def test_a_tools_list_changed_notification_quarantines_what_changed(http_server):
    import time

    from loop.cancellation import CancelToken
    from skald.mcp.services import server_spec

    pool().call(server_spec(http_server), "mutate", {}, cancel=CancelToken(), timeout=30)

    deadline = time.monotonic() + 30  # the refresh runs on a thread of its own: polled, bounded
    tool = McpTool.objects.get(server=http_server, name="delete_thing")
    while tool.status != McpToolStatus.QUARANTINED and time.monotonic() < deadline:
        time.sleep(0.02)
        tool.refresh_from_db()
    assert tool.status == McpToolStatus.QUARANTINED
    assert tool.pending["description"] == "Delete a thing, and its neighbours."


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/mcp",  # private
    "https://169.254.169.254/latest",  # cloud metadata
    "http://127.0.0.1:9/mcp",  # loopback, not admitted by SKALD_MCP_ALLOW_CIDRS here
])
def test_an_ssrf_refused_url_is_refused_at_save(mcp_setup, settings, alice, url):
    settings.SKALD_MCP_ALLOW_CIDRS = ""
    with pytest.raises(McpConfigError) as refused:
        mcp_server_create(actor=Actor.user(alice), data={"name": "bad", "transport": "http", "url": url})
    assert refused.value.code == "mcp_ssrf_refused"
    assert not McpServer.objects.filter(name="bad").exists()


def test_a_program_outside_the_allowlist_is_refused_at_save(mcp_setup, alice):
    with pytest.raises(McpConfigError) as refused:
        mcp_server_create(actor=Actor.user(alice), data={"name": "sh", "transport": "stdio", "argv": ["/bin/sh"]})
    assert refused.value.code == "mcp_program_not_allowed"


def test_an_allow_cidrs_setting_that_does_not_parse_refuses_the_save(mcp_setup, settings, alice):
    settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/33"
    with pytest.raises(McpConfigError) as refused:
        mcp_server_create(actor=Actor.user(alice), data={"name": "cidr", "transport": "http",
                                                         "url": "http://127.0.0.1:9/mcp"})
    assert refused.value.code == "mcp_allow_cidrs_invalid" and "SKALD_MCP_ALLOW_CIDRS" in str(refused.value)
