"""Sampling against a real MCP server (stdio, the SDK's server API): the server's ``haiku`` tool asks the
client's model for a text. Refused unless the server is allowed to sample; when allowed, the calling
frame's provider answers, its tokens are charged to the exchange's ledger, and each request is audited."""

from __future__ import annotations

import json
from typing import Any

import pytest

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.providers.loopback import text_turn, tool_turn
from skald.mcp.services import mcp_server_update

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def sampling_rows() -> list[dict[str, Any]]:
    return [json.loads(e.payload) for e in AuditEvent.objects.filter(kind=AuditKind.MCP_SAMPLING).order_by("seq")]


def test_sampling_is_refused_unless_the_server_is_allowed_and_the_refusal_is_audited(stdio_server, script, ask):
    server = stdio_server()
    assert server.allow_sampling is False
    provider = script(tool_turn(("mcp__demo__haiku", {"topic": "rain"})), text_turn("no haiku"))

    exchange = ask("a haiku")

    assert exchange.outcome == "completed"
    assert len(provider.calls) == 2  # the tool's turn and the answer: the model was never asked to sample
    result = provider.calls[1].messages[-1].content
    assert "sampling is not allowed for MCP server 'demo'" in result
    assert [(row["served"], row["code"], row["tool"]) for row in sampling_rows()] == [
        (False, "mcp_sampling_not_allowed", "mcp__demo__haiku")]
    assert exchange.reserved_tokens == 30  # the two turns (10 + 5 each), nothing else


def test_an_allowed_sampling_asks_the_frames_model_and_charges_its_budget(stdio_server, script, ask, alice):
    server = mcp_server_update(actor=Actor.user(alice), server=stdio_server(), data={"allow_sampling": True})
    assert server.allow_sampling is True
    provider = script(tool_turn(("mcp__demo__haiku", {"topic": "rain"})),
                      text_turn("soft rain on the roof", usage=(7, 3)), text_turn("done"))

    exchange = ask("a haiku")

    assert exchange.outcome == "completed"
    sampled = provider.calls[1]
    assert sampled.system == "You write haiku." and sampled.tools == ()
    assert sampled.messages[-1].content == "A haiku about rain"
    assert "the model wrote: soft rain on the roof" in provider.calls[2].messages[-1].content
    assert exchange.reserved_tokens == 30 + 7 + 3  # the sampling's tokens, charged to the exchange's ledger
    [row] = sampling_rows()
    assert (row["served"], row["input_tokens"], row["output_tokens"], row["agent"]) == (True, 7, 3, "operator")
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_SERVER_CHANGED, payload__contains="allow_sampling").exists()


def test_the_api_sets_and_shows_allow_sampling(api, mcp_setup, stdio_server, settings):
    from tests.conftest import make_user

    root = make_user("root", superuser=True)
    stdio_server()
    assert api(root).get("/api/mcp/servers/demo/").json()["allow_sampling"] is False

    response = api(root).patch("/api/mcp/servers/demo/", {"allow_sampling": True}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["allow_sampling"] is True
