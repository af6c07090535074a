"""An agent's governance settings over the policy API (issue 32): through ``agent_save``, with ETag / If-Match."""

from __future__ import annotations

from typing import Any

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.agents.seed import seed_agents
from skald.models import Agent
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(api: Any) -> Any:
    seed_agents()
    return api(make_user("root", superuser=True))


def test_it_changes_an_agents_tools_and_budget_through_the_service(admin_api):
    agent = Agent.objects.get(name="troubleshooter")
    url = f"/api/policy/agents/{agent.pk}/"
    read = admin_api.get(url)
    assert read.status_code == 200 and read.json()["name"] == "troubleshooter" and read["ETag"] == read.json()["etag"]
    assert any(a["name"] == "troubleshooter" for a in admin_api.get("/api/policy/agents/").json())

    changed = admin_api.patch(url, {"tools": ["read_logs"], "bounds": {"budget_tokens": 1000, "max_turns": 5}},
                              format="json", HTTP_IF_MATCH=read["ETag"])
    assert changed.status_code == 200, changed.json()
    assert changed.json()["tools"] == ["read_logs"] and changed.json()["bounds"] == {"budget_tokens": 1000,
                                                                                    "max_turns": 5}
    agent.refresh_from_db()
    assert agent.allowed_tools == ["read_logs"] and agent.bounds["budget_tokens"] == 1000
    assert AuditEvent.objects.filter(kind=AuditKind.AGENT_CHANGED, subject_id=str(agent.pk)).exists()

    stale = admin_api.patch(url, {"tools": []}, format="json", HTTP_IF_MATCH=read["ETag"])
    assert (stale.status_code, stale.json()["code"]) == (412, "precondition_failed")
    assert admin_api.patch(url, {"tools": []}, format="json").status_code == 428


def test_a_bound_that_is_not_positive_or_not_a_bound_is_refused(admin_api):
    agent = Agent.objects.get(name="troubleshooter")
    url = f"/api/policy/agents/{agent.pk}/"
    etag = admin_api.get(url)["ETag"]
    for bounds in ({"max_turns": 0}, {"turns": 3}):
        response = admin_api.patch(url, {"bounds": bounds}, format="json", HTTP_IF_MATCH=etag)
        assert response.status_code == 400 and response.json()["code"] in {"invalid", "unknown_field"}
    assert admin_api.get("/api/policy/agents/987654/").json()["code"] == "agent_not_found"


def test_an_agents_mcp_servers_change_through_each_servers_own_list(admin_api, settings):
    from skald.mcp.models import McpServer
    from skald.mcp.services import mcp_server_create
    from tests.approvals.policy_fixtures import ADMIN

    settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/8"
    for name, agents in (("tickets", []), ("wiki", ["troubleshooter"]), ("status", ["*"])):
        mcp_server_create(actor=ADMIN, data={"name": name, "transport": "http", "url": f"https://127.0.0.1/{name}",
                                             "agents": agents})
    agent = Agent.objects.get(name="troubleshooter")
    url = f"/api/policy/agents/{agent.pk}/"
    read = admin_api.get(url)
    assert read.json()["mcp_servers"] == ["status", "wiki"]  # the '*' server serves it too
    created = AuditEvent.objects.filter(kind=AuditKind.MCP_SERVER_CHANGED).count()

    changed = admin_api.patch(url, {"mcp_servers": ["status", "tickets"]}, format="json",
                              HTTP_IF_MATCH=read["ETag"])
    assert changed.status_code == 200, changed.json()
    assert changed.json()["mcp_servers"] == ["status", "tickets"] and changed["ETag"] != read["ETag"]
    assert McpServer.objects.get(name="tickets").agents == ["troubleshooter"]
    assert McpServer.objects.get(name="wiki").agents == []
    changes = AuditEvent.objects.filter(kind=AuditKind.MCP_SERVER_CHANGED).order_by("pk")[created:]
    assert sorted(row.subject_id for row in changes) == ["tickets", "wiki"]  # each server's own audit row

    every = admin_api.patch(url, {"mcp_servers": ["tickets"]}, format="json", HTTP_IF_MATCH=changed["ETag"])
    assert (every.status_code, every.json()["code"]) == (409, "mcp_server_serves_every_agent")
    unknown = admin_api.patch(url, {"mcp_servers": ["status", "nope"]}, format="json", HTTP_IF_MATCH=changed["ETag"])
    assert (unknown.status_code, unknown.json()["code"]) == (404, "mcp_server_not_found")
    assert McpServer.objects.get(name="tickets").agents == ["troubleshooter"]  # a refusal changed nothing
