"""MCP servers in the policy document (issue 32): exported, planned and applied through the MCP
services the admin and the API use, so the same checks refuse the same configurations."""

from __future__ import annotations

import sys

import pytest
import yaml
from django.contrib.auth.models import User

from approvals.models import ApprovalRule, SecurityGroup
from approvals.policy_doc.apply import policy_apply
from approvals.policy_doc.document import digest
from approvals.policy_doc.export import policy_export
from approvals.policy_doc.parse import PolicyInvalid, load_text, parse
from approvals.policy_doc.plan import policy_plan
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.mcp import tools_cache
from skald.mcp.models import McpServer, McpTool
from tests.approvals.policy_fixtures import ADMIN, DEMO_MCP_SCRIPT, configure

pytestmark = [pytest.mark.django_db, pytest.mark.db_sensitive]


@pytest.fixture
def configured(alice: User, settings) -> SecurityGroup:
    settings.SKALD_MCP_STDIO_ALLOWLIST = (sys.executable,)
    return configure(alice)


def document(change) -> str:
    text, _ = policy_export()
    data = yaml.safe_load(text)
    change(data)
    return yaml.safe_dump(data, sort_keys=False)


def test_the_export_names_each_server_and_its_secret_files_never_a_secret(configured: SecurityGroup) -> None:
    text, _ = policy_export()
    assert yaml.safe_load(text)["mcp_servers"] == [{
        "name": "demo", "transport": "stdio", "argv": [sys.executable, DEMO_MCP_SCRIPT],
        "secret_env": {"DEMO_TOKEN": "/run/secrets/demo-token"}, "trust": "untrusted",
        "agents": ["troubleshooter"], "enabled": False}]


def test_plan_and_apply_create_change_and_delete_servers_through_the_mcp_services(configured: SecurityGroup,
                                                                                  settings) -> None:
    settings.SKALD_MCP_ALLOW_CIDRS = "127.0.0.0/8"

    def change(data: dict) -> None:
        data["mcp_servers"][0].update(trust="trusted", agents=["*"])
        data["mcp_servers"].append({"name": "tickets", "transport": "http", "url": "https://127.0.0.1:8443/mcp",
                                    "secret_headers": {"Authorization": "/run/secrets/tickets"}})

    text = document(change)
    plan = policy_plan(parse(load_text(text)), days=None)
    assert [c.words() for c in plan.changes] == [
        "Change MCP server 'demo': trust 'untrusted' → 'trusted', agents 'troubleshooter' → '*' (mcp_servers[0])",
        "Create MCP server 'tickets' (http https://127.0.0.1:8443/mcp, untrusted, agents none, disabled) "
        "(mcp_servers[1])",
    ]
    assert McpServer.objects.get(name="demo").trust == "untrusted"  # a plan changes nothing

    before = AuditEvent.objects.filter(kind=AuditKind.MCP_SERVER_CHANGED).count()
    applied = policy_apply(actor=ADMIN, doc=parse(load_text(text)), expect_digest=plan.live_digest)
    assert [(c.op, c.subject) for c in applied.changes] == [("update", "mcp_server"), ("create", "mcp_server")]
    demo, tickets = McpServer.objects.order_by("name")
    assert (demo.trust, demo.agents) == ("trusted", ["*"])
    assert (tickets.url, tickets.secret_headers, tickets.enabled) == (
        "https://127.0.0.1:8443/mcp", {"Authorization": "/run/secrets/tickets"}, False)
    # The services' own audit rows, one each, beside the apply's.
    assert AuditEvent.objects.filter(kind=AuditKind.MCP_SERVER_CHANGED).count() == before + 2
    again, again_digest = policy_export()  # the live policy now is the document
    assert again_digest == applied.digest == digest(parse(load_text(text)))
    assert policy_plan(parse(load_text(again)), days=None).changes == ()

    applied = policy_apply(actor=ADMIN, doc=parse(load_text(document(lambda d: d["mcp_servers"].pop(1)))))
    assert [c.words() for c in applied.changes] == ["Delete MCP server 'tickets' and its pinned tools"]
    assert list(McpServer.objects.values_list("name", flat=True)) == ["demo"]


def test_a_server_the_mcp_checks_refuse_rolls_back_the_whole_document_and_is_named_by_path(
        configured: SecurityGroup, settings) -> None:
    settings.SKALD_MCP_STDIO_ALLOWLIST = ()  # the deployment allows no stdio program now

    def change(data: dict) -> None:
        data["rules"][0]["priority"] = 7
        data["mcp_servers"].append({"name": "shell", "transport": "stdio", "argv": ["/bin/sh", "-c", "id"]})

    rules_before = list(ApprovalRule.objects.values_list("id", "priority").order_by("id"))
    with pytest.raises(PolicyInvalid) as refused:
        policy_apply(actor=ADMIN, doc=parse(load_text(document(change))))
    [problem] = refused.value.problems
    assert (problem.path, problem.code) == ("mcp_servers[1].argv", "mcp_program_not_allowed")
    assert list(ApprovalRule.objects.values_list("id", "priority").order_by("id")) == rules_before
    assert not McpServer.objects.filter(name="shell").exists()


@pytest.mark.parametrize(("server", "path", "code"), [
    ({"name": "x", "transport": "smtp"}, "mcp_servers[1].transport", "invalid"),
    ({"name": "x", "transport": "stdio"}, "mcp_servers[1].argv", "required"),
    ({"name": "x", "transport": "stdio", "argv": ["/bin/true"], "url": "https://a.example/"},
     "mcp_servers[1].url", "invalid"),
    ({"name": "x y", "transport": "http", "url": "https://a.example/"}, "mcp_servers[1].name", "invalid"),
    ({"name": "x", "transport": "http", "url": "https://a.example/", "trust": "maybe"},
     "mcp_servers[1].trust", "invalid"),
    ({"name": "x", "transport": "http", "url": "https://a.example/", "secret_headers": ["a"]},
     "mcp_servers[1].secret_headers", "type"),
    ({"name": "x", "transport": "http", "url": "https://a.example/", "tools": ["a"]},
     "mcp_servers[1].tools", "unknown_field"),
    ({"name": "demo", "transport": "http", "url": "https://a.example/"}, "mcp_servers[1].name", "duplicate"),
])
def test_a_malformed_server_entry_is_refused_by_path(configured: SecurityGroup, server: dict, path: str,
                                                     code: str) -> None:
    with pytest.raises(PolicyInvalid) as refused:
        parse(load_text(document(lambda data: data["mcp_servers"].append(server))))
    assert (path, code) in {(p.path, p.code) for p in refused.value.problems}


@pytest.mark.slow
def test_a_document_that_enables_a_server_pins_the_tools_it_lists_now(configured: SecurityGroup, settings,
                                                                      tmp_path) -> None:
    """Enabling through the document is an admin's enabling: the server is started and what it lists is
    pinned, in the apply's transaction."""
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    tools_cache.forget()

    def enable(data: dict) -> None:
        data["mcp_servers"][0].update(enabled=True, secret_env={})

    applied = policy_apply(actor=ADMIN, doc=parse(load_text(document(enable))))
    assert [c.words() for c in applied.changes] == [
        "Change MCP server 'demo': secrets 'DEMO_TOKEN' → 'none', enabled false → true (mcp_servers[0])"]
    assert McpServer.objects.get(name="demo").enabled
    assert set(McpTool.objects.values_list("name", flat=True)) == {"service_status", "restart_service"}
