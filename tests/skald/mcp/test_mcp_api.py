"""``/api/mcp/servers/…``: admins only, validation at save with stable codes, tools with their pins."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.mcp.models import McpServer
from tests.conftest import make_user
from tests.skald.mcp.conftest import SERVER_SCRIPT

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def root(db: None) -> Any:
    return make_user("root", superuser=True)


def test_only_an_admin_reads_or_writes_servers(api, alice, mcp_setup):
    assert api(alice).get("/api/mcp/servers/").json()["code"] == "admin_required"
    assert api(None).get("/api/mcp/servers/").status_code == 401


@pytest.mark.parametrize(("body", "code"), [
    ({"name": "a__b", "transport": "stdio", "argv": ["x"]}, "mcp_name_invalid"),
    ({"name": "Upper", "transport": "stdio", "argv": ["x"]}, "invalid"),
    ({"name": "sh", "transport": "stdio", "argv": ["/bin/sh"]}, "mcp_program_not_allowed"),
    ({"name": "meta", "transport": "http", "url": "https://169.254.169.254/"}, "mcp_ssrf_refused"),
    ({"name": "ftp", "transport": "http", "url": "ftp://example.org/"}, "mcp_url_invalid"),
    ({"name": "x", "transport": "stdio", "argv": ["x"], "colour": "red"}, "unknown_field"),
])
def test_a_refused_configuration_answers_400_with_a_stable_code(api, root, mcp_setup, settings, body, code):
    settings.SKALD_MCP_ALLOW_CIDRS = ""
    response = api(root).post("/api/mcp/servers/", body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, code)
    assert not McpServer.objects.exists()


def test_an_admin_registers_reads_changes_and_deletes_a_server(api, root, mcp_setup, secret_files):
    client = api(root)
    created = client.post("/api/mcp/servers/", {
        "name": "demo", "transport": "stdio", "argv": [sys.executable, SERVER_SCRIPT], "agents": ["operator"],
        "secret_env": [{"name": k, "file": str(v)} for k, v in secret_files.items()], "enabled": True}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["status"] == "connected" and created.json()["tools"] == {"active": 13}

    tools = client.get("/api/mcp/servers/demo/tools/").json()
    echo = next(t for t in tools if t["name"] == "echo")
    assert echo["offered_as"] == "mcp__demo__echo" and len(echo["digest"]) == 64
    assert echo["annotations"]["readOnlyHint"] is True

    changed = client.patch("/api/mcp/servers/demo/", {"trust": "trusted"}, format="json")
    assert changed.status_code == 200 and changed.json()["trust"] == "trusted"
    assert client.patch("/api/mcp/servers/demo/", {"name": "other"}, format="json").json()["code"] \
        == "mcp_name_immutable"

    assert client.delete("/api/mcp/servers/demo/").json() == {"name": "demo", "deleted": True}
    assert client.get("/api/mcp/servers/demo/").json()["code"] == "mcp_server_not_found"
    kinds = set(AuditEvent.objects.filter(subject_id="demo").values_list("kind", flat=True))
    assert {AuditKind.MCP_SERVER_CHANGED, AuditKind.MCP_TOOLS_PINNED} <= kinds
