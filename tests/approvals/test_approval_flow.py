"""Durable approvals end to end (SPEC A3, A4, R3): park, resolve, reject, expire, restart."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection

from approvals.models import ApprovalStatus, PendingApproval
from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, ExchangeStatus, SessionEvent, ToolCall, ToolCallStatus
from loop.providers.base import ToolResultMessage
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from skald.core import clock
from skald.models import Agent
from skald.sessions.services import session_message_submit
from skald.sessions.workspace import read_current, workspace_write
from skald.tasks import expire_approvals

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\npool exhausted\n"})


def park_a_write(alice, session, script, *after) -> LoopbackProvider:
    provider = script(tool_turn(WRITE), *after)
    exchange, _ = session_message_submit(user=alice, session=session, content="investigate")
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.PARKED and exchange.outcome == "awaiting_human"
    return provider


def test_a_gated_write_parks_with_a_diff_and_completes_after_approval(alice, carol, api, troubleshooting, script):
    provider = park_a_write(alice, troubleshooting, script, text_turn("report written"))
    approval = PendingApproval.objects.get()
    assert approval.status == ApprovalStatus.PENDING and approval.tool == "write_file"
    assert approval.preview.startswith("new file: reports/findings.md")
    assert "+pool exhausted" in approval.preview
    listed = api(carol).get("/api/approvals/?status=pending").json()
    assert [a["request_id"] for a in listed] == [str(approval.request_id)]
    assert set(listed[0]) >= {"request_id", "tool_call_id", "session", "tool", "args", "preview", "rule",
                              "requested_by", "expires_at", "status"}
    assert SessionEvent.objects.filter(session=troubleshooting, kind="control:approval_requested").exists()

    response = api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert response.status_code == 202, response.content
    exchange = Exchange.objects.get(session=troubleshooting)
    assert exchange.status == ExchangeStatus.SETTLED and exchange.outcome == "completed"
    assert read_current(troubleshooting.pk, "reports/findings.md") == "# Findings\npool exhausted\n"
    assert provider.calls[-1].messages[-1].content.startswith("wrote ")

    again = api(carol).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert again.status_code == 409 and again.json()["code"] == "approval_already_resolved"


def test_the_preview_diffs_against_the_workspace_file_not_the_cwd(alice, troubleshooting, script):
    workspace_write(session_id=troubleshooting.pk, path="reports/findings.md", data=b"# Findings\nunknown\n",
                    actor=Actor.user(alice))
    park_a_write(alice, troubleshooting, script)
    preview = PendingApproval.objects.get().preview
    assert "-unknown" in preview and "+pool exhausted" in preview and "new file" not in preview


def test_a_reject_gives_the_model_a_rejected_result_and_the_run_continues(alice, carol, api, troubleshooting, script):
    provider = park_a_write(alice, troubleshooting, script, text_turn("ok, not writing"))
    approval = PendingApproval.objects.get()
    response = api(carol).post(f"/api/approvals/{approval.request_id}/resolve",
                               {"decision": "reject", "reason": "not in prod"}, format="json")
    assert response.status_code == 202
    seen = provider.calls[-1].messages[-1]
    assert isinstance(seen, ToolResultMessage) and seen.is_error
    assert seen.content == "rejected by a human: not in prod"
    assert ToolCall.objects.get(tool="write_file").status == ToolCallStatus.REJECTED
    assert Exchange.objects.get(session=troubleshooting).outcome == "completed"
    assert read_current(troubleshooting.pk, "reports/findings.md") is None


@pytest.mark.parametrize("reason", [None, "", "   "])
def test_a_reject_without_a_reason_is_refused_and_the_call_stays_pending(alice, carol, api, troubleshooting, script,
                                                                         reason):
    """The requester reads why: a reason-less rejection is a 400 ``reason_required`` and changes nothing."""
    park_a_write(alice, troubleshooting, script, text_turn("ok"))
    approval = PendingApproval.objects.get()
    body = {"decision": "reject"} if reason is None else {"decision": "reject", "reason": reason}
    response = api(carol).post(f"/api/approvals/{approval.request_id}/resolve", body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "reason_required")
    approval.refresh_from_db()
    assert approval.status == ApprovalStatus.PENDING
    assert not AuditEvent.objects.filter(kind=AuditKind.APPROVAL_RESOLVED).exists()


def test_an_overdue_approval_expires_the_model_gets_expired_and_a_late_resolve_is_gone(
    alice, carol, api, troubleshooting, script
):
    provider = park_a_write(alice, troubleshooting, script, text_turn("moving on"))
    PendingApproval.objects.update(expires_at=clock.now() - timedelta(seconds=1))
    assert expire_approvals() == 1
    seen = provider.calls[-1].messages[-1]
    assert seen.is_error and seen.content.startswith("expired")
    assert ToolCall.objects.get(tool="write_file").status == ToolCallStatus.EXPIRED
    assert Exchange.objects.get(session=troubleshooting).outcome == "completed"
    late = api(carol).post(f"/api/approvals/{PendingApproval.objects.get().request_id}/resolve",
                           {"decision": "approve"}, format="json")
    assert late.status_code == 410 and late.json()["code"] == "approval_expired"


def test_only_approvers_resolve_and_four_eyes_refuses_the_requester(alice, bob, api, troubleshooting, script,
                                                                   settings):
    park_a_write(alice, troubleshooting, script, text_turn("x"))
    call_id = PendingApproval.objects.get().tool_call_id
    assert api(bob).post(f"/api/tools/{call_id}/resolve", {"decision": "approve"}, format="json").status_code == 403
    assert api(None).post(f"/api/tools/{call_id}/resolve", {"decision": "approve"}, format="json").status_code == 401
    from django.contrib.auth.models import Group

    alice.groups.add(Group.objects.get(name="approver"))
    settings.SKALD_FOUR_EYES = True
    own = api(alice).post(f"/api/tools/{call_id}/resolve", {"decision": "approve"}, format="json")
    assert own.status_code == 403 and own.json()["code"] == "four_eyes_required"
    assert PendingApproval.objects.get().status == ApprovalStatus.PENDING


def test_changed_arguments_refuse_the_approval(alice, carol, api, troubleshooting, script):
    park_a_write(alice, troubleshooting, script, text_turn("x"))
    ToolCall.objects.filter(tool="write_file").update(arguments={"path": "x", "content": "evil"},
                                                      arguments_hash="0" * 64)
    response = api(carol).post(f"/api/tools/{PendingApproval.objects.get().tool_call_id}/resolve",
                               {"decision": "approve"}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "approval_arguments_changed"


def test_a_round_with_two_gated_calls_parks_one_batch_answerable_at_once(alice, carol, api, troubleshooting, script):
    second = ("write_file", {"path": "reports/two.md", "content": "2"})
    script(tool_turn(WRITE, second), text_turn("both done"))
    session_message_submit(user=alice, session=troubleshooting, content="two writes")
    approvals = list(PendingApproval.objects.order_by("tool_call_id"))
    assert len(approvals) == 2 and approvals[0].batch == approvals[1].batch == "e1:t1"
    first = api(carol).post(f"/api/approvals/{approvals[0].request_id}/resolve", {"decision": "approve"},
                            format="json")
    assert first.status_code == 202
    assert Exchange.objects.get().status == ExchangeStatus.PARKED  # the other call still waits
    rest = api(carol).post(f"/api/approvals/batches/{troubleshooting.pk}/e1:t1/resolve", {"decision": "reject",
                           "reason": "one is enough"}, format="json")
    assert rest.status_code == 202 and len(rest.json()["approvals"]) == 1
    assert Exchange.objects.get().outcome == "completed"


@pytest.mark.slow
def test_resolving_in_a_fresh_process_continues_the_run(alice, carol, troubleshooting):
    # The agent's own deterministic playbook drives both processes: nothing is scripted in memory.
    Agent.objects.filter(name="troubleshooter").update(
        playbook=[{"tool": WRITE[0], "args": WRITE[1]}, {"answer": "report written"}]
    )
    exchange, _ = session_message_submit(user=alice, session=troubleshooting, content="investigate")
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.PARKED
    request_id = str(PendingApproval.objects.get().request_id)
    db = connection.settings_dict
    env = {**os.environ, "SKALD_SYNC_TASKS": "1",
           "SKALD_LOOP_BOUNDS": json.dumps({"max_turns": 8})}
    if connection.vendor == "sqlite":
        env["SKALD_SQLITE_PATH"] = str(db["NAME"])
        env.pop("DATABASE_URL", None)
    else:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    # A new process knows nothing but the rows: it resolves, and the continuation runs there.
    code = (
        "import django; django.setup();"
        "from django.contrib.auth.models import User;"
        "from approvals.pending.services import pending_approval_resolve;"
        f"pending_approval_resolve(resolver=User.objects.get(username='carol'), request_id='{request_id}',"
        " decision='approve')"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert read_current(troubleshooting.pk, "reports/findings.md") is not None
    exchange = Exchange.objects.get(session=troubleshooting)
    assert (exchange.status, exchange.outcome) == (ExchangeStatus.SETTLED, "completed")
    assert exchange.receipt["detail"]["answer"] == "report written"


def test_every_decision_and_resolution_is_in_the_chain_and_it_verifies(alice, carol, api, troubleshooting, script):
    park_a_write(alice, troubleshooting, script, text_turn("done"))
    api(carol).post(f"/api/tools/{PendingApproval.objects.get().tool_call_id}/resolve", {"decision": "approve"},
                    format="json")
    decisions = AuditEvent.objects.filter(kind=AuditKind.GATE_DECISION)
    assert decisions.count() >= 1
    payload = json.loads(decisions.first().payload)
    assert payload["action"] == "require" and "arguments_hash" in payload and "content" not in payload
    assert AuditEvent.objects.filter(kind=AuditKind.APPROVAL_REQUESTED).count() == 1
    resolved = json.loads(AuditEvent.objects.get(kind=AuditKind.APPROVAL_RESOLVED).payload)
    assert resolved["decision"] == "approve"
    call_command("verify_chain")
