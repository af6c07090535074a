"""The MCP admin pages: a server's status and tools, a quarantined tool's diff, approve and keep
(both audited through the services). No server process: the listing is given to the service."""

from __future__ import annotations

from typing import Any

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core import clock
from skald.mcp.definitions import Definition
from skald.mcp.models import McpElicitation, McpServer, McpServerStatus, McpTool, McpToolStatus
from skald.mcp.services import _pin, mcp_server_refresh
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

PINNED = Definition("lookup", "Look a thing up.", {"type": "object"}, {"readOnlyHint": True})
CHANGED = Definition("lookup", "Look a thing up, then mail it out.", {"type": "object"}, {"readOnlyHint": True})


@pytest.fixture
def quarantined(db: None) -> McpTool:
    now = clock.now()
    server = McpServer.objects.create(name="tickets", transport="http", url="https://mcp.example.org/mcp",
                                      enabled=True, status=McpServerStatus.FAILING, last_error="boom: refused",
                                      created_at=now, updated_at=now)
    tool = McpTool(server=server, name="lookup", pinned_at=now)
    _pin(tool, PINNED, now)
    tool.save()
    assert mcp_server_refresh(server=server, listing=[CHANGED])["quarantined"] == ["lookup"]
    return McpTool.objects.get(pk=tool.pk)


@pytest.fixture
def root_client(client: Any) -> Any:
    client.force_login(make_user("root", superuser=True))
    return client


def test_the_server_page_shows_its_status_last_error_and_tools(root_client, quarantined):
    page = root_client.get(f"/admin/skald/mcpserver/{quarantined.server_id}/change/").content.decode()
    assert "boom: refused" in page and "lookup" in page and quarantined.digest in page


def test_a_quarantined_tool_shows_a_diff_and_an_admin_approves_it(root_client, quarantined):
    page = root_client.get(f"/admin/skald/mcptool/{quarantined.pk}/change/").content.decode()
    assert "+  &quot;description&quot;: &quot;Look a thing up, then mail it out.&quot;" in page

    root_client.post("/admin/skald/mcptool/", {"action": "approve_definition", "_selected_action": [quarantined.pk]})

    tool = McpTool.objects.get(pk=quarantined.pk)
    assert (tool.status, tool.digest, tool.description) == (McpToolStatus.ACTIVE, CHANGED.digest, CHANGED.description)
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_DEFINITION_APPROVED).count() == 1


def test_keeping_a_tool_quarantined_is_audited_and_changes_nothing(root_client, quarantined):
    root_client.post("/admin/skald/mcptool/", {"action": "keep_quarantined", "_selected_action": [quarantined.pk]})

    assert McpTool.objects.get(pk=quarantined.pk).status == McpToolStatus.QUARANTINED
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_DEFINITION_KEPT).count() == 1


def test_an_operator_who_is_not_an_admin_sees_no_mcp_pages(client, quarantined):
    client.force_login(make_user("op", "operator"))
    assert client.get("/admin/skald/mcptool/").status_code in (302, 403)


def test_an_admin_adds_a_server_through_the_form_and_a_refused_one_names_its_field(root_client, settings):
    settings.SKALD_MCP_ALLOW_CIDRS = ""
    form = {"name": "meta", "transport": "http", "url": "https://169.254.169.254/", "argv": "[]",
            "secret_env": "{}", "secret_headers": "{}", "trust": "untrusted", "agents": "[]",
            "tools-TOTAL_FORMS": "0", "tools-INITIAL_FORMS": "0"}
    page = root_client.post("/admin/skald/mcpserver/add/", form).content.decode()
    assert "mcp_ssrf_refused" in page and not McpServer.objects.filter(name="meta").exists()

    form |= {"name": "later", "url": "https://mcp.example.org/mcp"}
    from skald.mcp import config

    class Public:
        def resolve(self, host: str, port: int) -> list[str]:
            return ["93.184.215.14"]

    settings_resolver = config.egress.resolver
    config.egress.set_resolver(Public())
    try:
        response = root_client.post("/admin/skald/mcpserver/add/", form)
    finally:
        config.egress.set_resolver(settings_resolver)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else ""
    assert McpServer.objects.get(name="later").enabled is False


@pytest.fixture
def card(alice: Any) -> Any:
    from pathlib import Path

    from loop.ports import TurnScope
    from skald.mcp.calls import ElicitRequest
    from skald.mcp.elicitation import mcp_elicitation_open
    from skald.models import Agent, AgentKind
    from skald.sessions.services import session_create

    Agent.objects.create(name="operator", kind=AgentKind.CHAT)
    session = session_create(user=alice, agent="operator", title="deploy")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{alice.pk}", user_id=alice.pk,
                      agent="operator", workspace=Path("/nonexistent"))
    schema = {"type": "object", "properties": {"target": {"type": "string"}}, "required": ["target"]}
    return mcp_elicitation_open(server="tickets", tool="mcp__tickets__ask", scope=scope, call_id=7,
                                request=ElicitRequest(message="Where to?", schema=schema))


def test_the_admin_lists_cards_and_answers_one_through_the_service(root_client, card):
    listing = root_client.get("/admin/skald/mcpelicitation/")
    assert listing.status_code == 200 and b"mcp__tickets__ask" in listing.content
    page = root_client.get(f"/admin/skald/mcpelicitation/{card.pk}/change/")
    assert b"Where to?" in page.content and b'name="action"' in page.content

    refused = root_client.post(f"/admin/skald/mcpelicitation/{card.pk}/change/",
                               {"action": "accept", "content": '{"target": 3}'}, follow=True)
    assert [str(m) for m in refused.context["messages"]] == [
        "mcp_elicitation_content_invalid: the answer does not fit the requested schema at target: 3 is not of type "
        "'string'"]
    assert b'name="action"' in refused.content  # back on the card's form
    assert McpElicitation.objects.get(pk=card.pk).status == "pending"
    root_client.post(f"/admin/skald/mcpelicitation/{card.pk}/change/",
                     {"action": "accept", "content": '{"target": "eu-1"}'})

    card.refresh_from_db()
    assert (card.status, card.answer) == ("accepted", {"target": "eu-1"})
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_ELICITATION_ANSWERED, subject_id=str(card.pk)).count() == 1
    assert b'name="action"' not in root_client.get(f"/admin/skald/mcpelicitation/{card.pk}/change/").content


def test_a_sessions_pending_cards_are_listed_for_its_owner_and_an_admin_only(card, api, alice, charlie):
    root = make_user("root", superuser=True)
    route = f"/api/mcp/elicitations/?session={card.session_id}"

    mine = api(alice).get(route)

    assert mine.status_code == 200
    assert [(c["id"], c["status"], c["message"]) for c in mine.json()] == [(card.pk, "pending", "Where to?")]
    assert [c["id"] for c in api(root).get(route).json()] == [card.pk]
    assert api(charlie).get(route).json() == []
    assert api(alice).get("/api/mcp/elicitations/?session=x").json()["code"] == "invalid"


def test_a_card_is_announced_to_the_sessions_viewers_when_opened_and_when_answered(
        alice, monkeypatch, django_capture_on_commit_callbacks):
    from pathlib import Path

    from loop.ports import TurnScope
    from skald.loop_adapters import bus
    from skald.mcp.calls import ElicitRequest
    from skald.mcp.elicitation import mcp_elicitation_answer, mcp_elicitation_open
    from skald.models import Agent, AgentKind
    from skald.sessions.services import session_create

    sent: list[tuple[int, dict[str, Any]]] = []
    monkeypatch.setattr(bus.ChannelsBus, "delta", lambda self, sid, payload: sent.append((sid, dict(payload))))
    Agent.objects.create(name="operator", kind=AgentKind.CHAT)
    session = session_create(user=alice, agent="operator", title="deploy")
    scope = TurnScope(session_id=session.pk, exchange_id=0, principal=f"user:{alice.pk}", user_id=alice.pk,
                      agent="operator", workspace=Path("/nonexistent"))

    with django_capture_on_commit_callbacks(execute=True):
        card = mcp_elicitation_open(server="tickets", tool="mcp__tickets__ask", scope=scope, call_id=7,
                                    request=ElicitRequest(message="Proceed?", schema={"type": "object"}))
    with django_capture_on_commit_callbacks(execute=True):
        mcp_elicitation_answer(user=alice, elicitation_id=card.pk, action="decline")

    assert [(sid, p["type"], p["id"], p["status"], p["owner"]) for sid, p in sent] == [
        (session.pk, "mcp.elicitation", card.pk, "pending", alice.pk),
        (session.pk, "mcp.elicitation", card.pk, "declined", alice.pk)]
