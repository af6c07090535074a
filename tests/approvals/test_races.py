"""Approvals and known tools under 20-way concurrency (issue 11 §3): one winner, every loser the
answer a sequential retry gets (never a 500), each fact audited exactly once."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import RefreshToken

from approvals.known_tools import known_tools_record
from approvals.models import ApprovalStatus, KnownTool, PendingApproval
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import ExchangeStatus
from loop.providers.base import ToolSpec
from loop.providers.loopback import text_turn, tool_turn
from skald.sessions.services import session_message_submit
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

N = 20
WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\n"})


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {RefreshToken.for_user(user).access_token}")
    return client


@pytest.mark.parametrize("route", ["request", "tool_call"])
def test_20_approvers_resolving_one_approval_make_one_decision(alice, carol, troubleshooting, script, route):
    script(tool_turn(WRITE), text_turn("written"))
    exchange, _ = session_message_submit(user=alice, session=troubleshooting, content="investigate")
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.PARKED
    approval = PendingApproval.objects.get()
    url = (f"/api/approvals/{approval.request_id}/resolve" if route == "request"
           else f"/api/tools/{approval.tool_call_id}/resolve")
    clients = [client_for(carol) for _ in range(N)]

    def resolve(i: int) -> tuple[int, Any]:
        response = clients[i].post(url, {"decision": "approve"}, format="json")
        return response.status_code, response.json()

    answers = race(N, resolve)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    won = [a for a in answers if a[0] < 300]
    lost = [a for a in answers if a[0] >= 300]
    assert len(won) == 1 and len(lost) == N - 1, answers
    retry = resolve(0)
    assert {(status, body["code"]) for status, body in lost} == {(retry[0], retry[1]["code"])} == {
        (409, "approval_already_resolved")}
    assert PendingApproval.objects.get().status == ApprovalStatus.APPROVED
    assert AuditEvent.objects.filter(kind=AuditKind.APPROVAL_RESOLVED).count() == 1


def test_20_recorders_of_the_same_new_tools_record_and_audit_each_once(db):
    specs = [ToolSpec(name=f"mcp_tool_{n}", description="d", parameters={}) for n in range(5)]
    created = race(N, lambda i: known_tools_record(specs=list(reversed(specs)) if i % 2 else specs))
    assert not [c for c in created if isinstance(c, BaseException)], created
    assert sum(created) == 5
    assert sorted(KnownTool.objects.values_list("name", flat=True)) == sorted(s.name for s in specs)
    audited = [name for row in AuditEvent.objects.filter(kind=AuditKind.KNOWN_TOOL_RECORDED)
               for name in __import__("json").loads(row.payload)["tools"]]
    assert sorted(audited) == sorted(s.name for s in specs)
