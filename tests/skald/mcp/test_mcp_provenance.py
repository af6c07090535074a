"""Injection provenance through a real MCP server (issue 30, docs/provenance.md): an untrusted
server's e-mail carries an IBAN and an injected instruction; the model then asks to send money to
that IBAN. The call parks under the default provenance rules, its approval says it follows
untrusted content (the decide page, the API's ``provenance`` field, the console's event), marks the
argument and highlights the suspect span, and it runs only once an approver acknowledges that.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalRule, ApprovalStatus, PendingApproval
from approvals.pending.services import pending_approval_resolve
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, SessionEvent
from loop.provenance import tool_read_only
from loop.providers.loopback import text_turn, tool_turn
from loop.verify import load_session_rows, verify_rows
from skald.core.errors import SkaldError
from skald.mcp.models import McpServer
from skald.mcp.services import mcp_server_create
from skald.mcp.tools import McpToolProxy
from tests.skald.mcp.conftest import counter

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

SERVER = str(Path(__file__).with_name("provenance_server.py"))
SEND = "mcp__bank__send_money"


@pytest.fixture
def bank(mcp_setup: None, alice: Any, secret_files: dict[str, Path]) -> McpServer:
    server = mcp_server_create(actor=Actor.user(alice), data={
        "name": "bank", "transport": "stdio", "argv": [sys.executable, SERVER], "trust": "untrusted",
        "agents": ["operator"], "enabled": True,
        "secret_env": {"MCP_TEST_STATE": str(secret_files["MCP_TEST_STATE"])}})
    # The operator lets the agent read its mail without asking; sending money is left to the defaults.
    ApprovalRule.objects.create(tool_pattern="mcp__bank__read_inbox", action="allow", priority=10)
    return server


@pytest.fixture
def parked(bank: McpServer, ask: Callable[[str], Exchange], script: Any) -> PendingApproval:
    script(tool_turn(("mcp__bank__read_inbox", {})),
           tool_turn((SEND, {"iban": "DE89370400440532013000", "amount": 1000})), text_turn("paid"))
    exchange = ask("deal with my mail")
    assert exchange.status == ExchangeStatus.PARKED
    return PendingApproval.objects.get(tool=SEND)


def test_the_send_call_parks_with_its_provenance_and_the_argument_marked(parked, state):
    provenance = parked.provenance
    assert provenance["tainted"] and provenance["acknowledge_required"]
    (source,) = provenance["sources"]
    assert (source["tool"], source["server"]) == ("mcp__bank__read_inbox", "bank")
    assert source["suspects"] and source["suspects"][0]["kind"] == "ignore_instructions"
    (argument,) = provenance["arguments"]
    assert (argument["path"], argument["how"], argument["suspect"]) == ("iban", "separators", True)
    assert counter(state, "payments") == 0
    # The suspect is an event of its own, and the gate's audit row carries the provenance.
    assert SessionEvent.objects.filter(session_id=parked.session_id, kind=EventKind.INJECTION_SUSPECT).exists()
    gate_row = AuditEvent.objects.get(kind=AuditKind.GATE_DECISION, subject_id=str(parked.tool_call_id))
    gate_payload = json.loads(gate_row.payload)
    assert gate_payload["provenance"]["arguments"][0]["path"] == "iban"
    assert gate_payload["provenance"]["sources"][0]["server"] == "bank"
    assert "DE89370400440532013000" not in gate_row.payload  # the audit keeps where, not the value
    # The console's card reads the approval event's payload.
    requested = SessionEvent.objects.get(session_id=parked.session_id, kind=EventKind.APPROVAL_REQUESTED)
    assert requested.payload["provenance"]["arguments"][0]["path"] == "iban"


def test_approving_it_needs_the_provenance_acknowledged_then_it_runs(parked, carol, state):
    with pytest.raises(SkaldError) as refused:
        pending_approval_resolve(resolver=carol, decision="approve", request_id=parked.request_id)
    assert refused.value.code == "provenance_acknowledgement_required"
    assert PendingApproval.objects.get(pk=parked.pk).status == ApprovalStatus.PENDING

    pending_approval_resolve(resolver=carol, decision="approve", request_id=parked.request_id,
                             provenance_acknowledged=True)

    assert counter(state, "payments") == 1
    assert Exchange.objects.get(pk=parked.tool_call.exchange_id).outcome == "completed"
    resolved = AuditEvent.objects.get(kind=AuditKind.APPROVAL_RESOLVED, subject_id=str(parked.request_id))
    assert json.loads(resolved.payload)["provenance_acknowledged"] is True
    assert verify_rows(load_session_rows(parked.session_id)) == []


def test_the_api_approval_object_carries_the_provenance(parked, api, carol):
    (item,) = [a for a in api(carol).get("/api/approvals/", {"status": "pending"}).json()
               if a["request_id"] == str(parked.request_id)]
    assert item["provenance"]["tainted"] is True
    assert item["provenance"]["arguments"][0]["path"] == "iban"
    assert item["provenance"]["sources"][0]["tool"] == "mcp__bank__read_inbox"
    assert item["provenance"]["sources"][0]["at"]  # when the result was recorded
    response = api(carol).post(f"/api/approvals/{parked.request_id}/resolve", {"decision": "approve"},
                               format="json")
    assert response.status_code == 400 and response.json()["code"] == "provenance_acknowledgement_required"


def test_the_decide_page_shows_the_banner_the_marked_argument_and_the_suspect_span(parked, carol):
    carol.is_staff = True
    carol.save(update_fields=["is_staff"])
    browser = Client()
    browser.force_login(carol)
    page = browser.get(reverse("admin:approvals_pendingapproval_change", args=[parked.pk])).content.decode()
    assert "This call follows untrusted content." in page
    assert page.index('id="approval-provenance"') < page.index("What it will do")  # above the arguments
    assert "mcp__bank__read_inbox" in page and "MCP server bank" in page
    assert 'data-path="iban"' in page
    assert '<mark class="skald-suspect">Ignore all previous instructions' in page
    assert 'name="provenance_acknowledged"' in page



def test_an_untrusted_servers_read_only_hint_counts_for_provenance_but_never_loosens_the_mcp_rules():
    read = McpToolProxy(name="mcp__bank__read_inbox", description="", parameters={}, server="bank",
                        tool="read_inbox", annotations={"readOnlyHint": True}, trusted=False)
    # $provenance.read_only: a read an operator allowed runs in a tainted frame, as a built-in's would
    assert tool_read_only(read)
    # but the server's claim makes no call concurrent, nothing re-run after a crash
    assert not read.concurrency_safe and read.restart_hint != "rerun"
    assert not tool_read_only(McpToolProxy(name="mcp__bank__send_money", description="", parameters={},
                                           server="bank", tool="send_money", annotations={}, trusted=False))
