"""Approvals in the admin (SPEC A2, O3): groups with a tool picker, audited rule edits, and the
parked-call inbox whose approve / reject actions go through the same service as the API."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.sites import site
from django.contrib.messages import get_messages
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from approvals.models import ApprovalRule, ApprovalStatus, KnownTool, PendingApproval, SecurityGroup
from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import ExchangeStatus
from loop.providers.loopback import text_turn, tool_turn
from skald.core import clock
from skald.sessions.services import session_message_submit
from tests.conftest import make_user

GROUPS = "/admin/approvals/securitygroup/"
RULES = "/admin/approvals/approvalrule/"
PENDING = "/admin/approvals/pendingapproval/"
WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\npool exhausted\n"})


@pytest.fixture
def root(db: None):
    return make_user("root", superuser=True)


def audit_payloads(kind: AuditKind) -> list[dict]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def page_messages(response) -> list[str]:
    return [str(message) for message in get_messages(response.wsgi_request)]


def rule_form(**overrides) -> dict[str, str]:
    return {"group": "", "tool_pattern": "read_logs", "arg_matchers": "{}", "action": "allow", "priority": "50",
            "approval_ttl": "", "enabled": "on", "note": "", **overrides}


def park_writes(alice, session, script, *calls) -> list[PendingApproval]:
    script(tool_turn(*(calls or (WRITE,))), text_turn("done"))
    exchange, _ = session_message_submit(user=alice, session=session, content="investigate")
    exchange.refresh_from_db()
    assert exchange.status == ExchangeStatus.PARKED
    return list(PendingApproval.objects.order_by("tool_call_id"))


# --- security groups and rules -------------------------------------------------------------------

@pytest.mark.django_db
def test_it_offers_every_known_tool_and_the_catch_all_in_the_group_tool_picker(client, root):
    KnownTool.objects.create(name="plugin_lookup", first_seen=clock.now(), last_seen=clock.now())
    client.force_login(root)
    page = client.get(GROUPS + "add/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<datalist id="skald-tool-catalog">' in html
    for name in ("*", "write_file", "read_logs", "execute_task", "plugin_lookup"):
        assert f'<option value="{name}">' in html, name
    # The inline rows (and the empty row the browser copies) point at that one list.
    assert 'name="rules-__prefix__-tool_pattern"' in html and 'list="skald-tool-catalog"' in html
    assert 'name="users"' in html and 'name="agents"' in html


@pytest.mark.django_db
def test_it_saves_a_group_with_members_and_inline_rules_through_the_services(client, root, alice):
    client.force_login(root)
    response = client.post(GROUPS + "add/", {
        "name": "oncall", "description": "night shift", "users": [str(alice.pk)],
        "rules-TOTAL_FORMS": "1", "rules-INITIAL_FORMS": "0", "rules-MIN_NUM_FORMS": "0",
        "rules-MAX_NUM_FORMS": "1000",
        "rules-0-priority": "10", "rules-0-tool_pattern": "execute_cmd", "rules-0-action": "deny",
        "rules-0-arg_matchers": '{"argv.0": "rm"}', "rules-0-approval_ttl": "", "rules-0-enabled": "on",
        "rules-0-note": "no deletes",
    })
    assert response.status_code == 302, response.content.decode()[-3000:]
    group = SecurityGroup.objects.get(name="oncall")
    assert list(group.users.all()) == [alice]
    rule = group.rules.get()
    assert (rule.tool_pattern, rule.action, rule.arg_matchers) == ("execute_cmd", "deny", {"argv.0": "rm"})
    [group_row] = audit_payloads(AuditKind.GROUP_CHANGED)
    assert group_row["created"] and group_row["users"] == [alice.pk] and "users" in group_row["changed"]
    [rule_row] = audit_payloads(AuditKind.RULE_CHANGED)
    assert rule_row["rule"]["id"] == rule.pk and rule_row["rule"]["group"] == "oncall"


@pytest.mark.django_db
def test_it_audits_a_rule_saved_in_the_admin_and_keeps_its_hit_count(client, root):
    client.force_login(root)
    response = client.post(RULES + "add/", rule_form(arg_matchers='{"path": "logs/*"}'))
    assert response.status_code == 302
    rule = ApprovalRule.objects.get(arg_matchers={"path": "logs/*"})
    [created] = audit_payloads(AuditKind.RULE_CHANGED)
    assert created["created"] is True and created["rule"]["tool_pattern"] == "read_logs"
    assert created["rule"]["arg_matchers"] == {"path": "logs/*"} and created["rule"]["group"] is None

    ApprovalRule.objects.filter(pk=rule.pk).update(hit_count=7)  # the gate counted hits meanwhile
    # (the page carries the matchers' initial value: the field has a callable default)
    response = client.post(f"{RULES}{rule.pk}/change/", rule_form(
        arg_matchers='{"path": "logs/*"}', priority="5", **{"initial-arg_matchers": '{"path": "logs/*"}'}))
    assert response.status_code == 302
    rule.refresh_from_db()
    assert (rule.priority, rule.hit_count) == (5, 7)
    changed = audit_payloads(AuditKind.RULE_CHANGED)[-1]
    assert changed["created"] is False and changed["changed"] == ["priority"]


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value", "message"), [
    ("arg_matchers", '{"path": 3}', "must map a path to a glob string"),
    ("arg_matchers", '["logs/*"]', "must be a JSON object"),
    ("arg_matchers", "{not json", "Enter a valid JSON"),
    ("tool_pattern", "   ", "This field is required"),
    ("priority", "-1", "greater than or equal to 0"),
])
def test_it_refuses_an_invalid_rule_with_a_form_error(client, root, field, value, message):
    before = ApprovalRule.objects.count()
    client.force_login(root)
    page = client.post(RULES + "add/", rule_form(**{field: value}))
    assert page.status_code == 200
    errors = page.context["adminform"].form.errors
    assert list(errors) == [field] and message in " ".join(errors[field])
    assert ApprovalRule.objects.count() == before
    assert not AuditEvent.objects.filter(kind=AuditKind.RULE_CHANGED).exists()


@pytest.mark.django_db
def test_it_lists_global_and_group_rules_by_priority_with_hit_counts_in_constant_queries(client, root):
    group = SecurityGroup.objects.create(name="oncall")  # the seeded global defaults are there too
    ApprovalRule.objects.create(group=group, tool_pattern="write_file", action="deny", priority=5, hit_count=11)
    ApprovalRule.objects.create(tool_pattern="read_*", action="allow", priority=7)
    client.force_login(root)
    page = client.get(RULES)
    rows = page.context["cl"].result_list
    assert [(r.priority, r.tool_pattern) for r in rows[:2]] == [(5, "write_file"), (7, "read_*")]
    assert [r.priority for r in rows] == sorted(r.priority for r in rows) and rows[len(rows) - 1].tool_pattern == "*"
    html = page.content.decode()
    assert "group: oncall" in html and "global" in html and '<td class="field-hit_count">11</td>' in html
    with CaptureQueriesContext(connection) as few:
        client.get(RULES)
    for n in range(10):
        ApprovalRule.objects.create(group=SecurityGroup.objects.create(name=f"g{n}"), tool_pattern="x", action="deny")
    with CaptureQueriesContext(connection) as many:
        client.get(RULES)
    assert len(many) == len(few)
    groups = client.get(GROUPS)
    assert groups.status_code == 200 and "oncall" in groups.content.decode()


@pytest.mark.django_db
def test_it_audits_deleting_a_rule_and_a_group(client, root):
    group = SecurityGroup.objects.create(name="oncall")
    rule = ApprovalRule.objects.create(group=group, tool_pattern="write_file", action="deny", priority=5)
    lone = ApprovalRule.objects.create(tool_pattern="read_logs", action="allow", priority=5)
    client.force_login(root)
    assert client.post(f"{RULES}{lone.pk}/delete/", {"post": "yes"}).status_code == 302
    assert client.post(f"{GROUPS}{group.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not ApprovalRule.objects.filter(pk__in=[rule.pk, lone.pk]).exists() and not SecurityGroup.objects.exists()
    [deleted_rule] = audit_payloads(AuditKind.RULE_CHANGED)
    assert deleted_rule["deleted"] and deleted_rule["rule"]["id"] == lone.pk
    [deleted_group] = audit_payloads(AuditKind.GROUP_CHANGED)
    assert deleted_group["deleted"] and [r["id"] for r in deleted_group["rules"]] == [rule.pk]


@pytest.mark.django_db
def test_nobody_edits_parked_calls_or_known_tools(client, root):
    request = RequestFactory().get(PENDING)
    request.user = root
    for model in (PendingApproval, KnownTool):
        model_admin = site._registry[model]
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)
    assert "delete_selected" not in site._registry[PendingApproval].get_actions(request)


# --- parked calls --------------------------------------------------------------------------------

flow = pytest.mark.django_db(transaction=True)


@flow
@pytest.mark.db_sensitive
def test_the_pending_page_shows_the_batch_and_the_coloured_diff(client, alice, carol, troubleshooting, script):
    second = ("write_file", {"path": "reports/two.md", "content": "two\n"})
    first, other = park_writes(alice, troubleshooting, script, WRITE, second)
    client.force_login(carol)
    page = client.get(PENDING)
    assert page.status_code == 200
    assert [a.pk for a in page.context["cl"].result_list] == [first.pk, other.pk]
    html = page.content.decode()
    assert f"s{troubleshooting.pk} · e1:t1" in html and "alice" in html
    batch = client.get(PENDING, {"session": troubleshooting.pk, "batch": "e1:t1", "state": "all"})
    assert [a.pk for a in batch.context["cl"].result_list] == [first.pk, other.pk]

    detail = client.get(f"{PENDING}{first.pk}/change/").content.decode()
    assert '<pre class="skald-diff">' in detail
    assert '<span class="diff-add">+pool exhausted</span>' in detail
    assert 'id="batch-members"' in detail and 'id="resolve-form"' in detail and 'name="_save"' not in detail


@flow
@pytest.mark.db_sensitive
def test_the_approve_action_asks_for_a_reason_then_resolves_through_the_service(
    client, alice, carol, troubleshooting, script
):
    [approval] = park_writes(alice, troubleshooting, script)
    client.force_login(carol)
    chosen = {"action": "approve_selected", "_selected_action": [str(approval.pk)], "index": "0"}
    confirm = client.post(PENDING, chosen)
    assert confirm.status_code == 200
    assert confirm.templates[0].name == "admin/approvals/pendingapproval/resolve_confirmation.html"
    assert 'name="reason"' in confirm.content.decode() and '<span class="diff-add">' in confirm.content.decode()
    assert PendingApproval.objects.get().status == ApprovalStatus.PENDING

    answer = {"action": "approve_selected", "_selected_action": [str(approval.pk)], "post": "yes",
              "reason": "diff reviewed"}
    done = client.post(PENDING, answer)
    assert done.status_code == 302
    approval.refresh_from_db()
    assert (approval.status, approval.resolved_by, approval.reason) == (ApprovalStatus.APPROVED, carol, "diff reviewed")
    [resolved] = audit_payloads(AuditKind.APPROVAL_RESOLVED)
    assert resolved["decision"] == "approve" and resolved["reason"] == "diff reviewed"
    assert any("Approved 1 call" in m for m in page_messages(done))

    again = client.post(PENDING, answer)
    assert any("already resolved" in m and "approval_already_resolved" in m for m in page_messages(again))
    assert len(audit_payloads(AuditKind.APPROVAL_RESOLVED)) == 1

    history = client.get(PENDING, {"state": "resolved"}).content.decode()
    assert "carol" in history and "diff reviewed" in history and "require &#x27;write_file&#x27;" in history
    detail = client.get(f"{PENDING}{approval.pk}/change/").content.decode()
    assert "diff reviewed" in detail and "require &#x27;write_file&#x27; @100 (global)" in detail
    assert 'id="resolve-form"' not in detail and "Nothing else is waiting." in detail


@flow
@pytest.mark.db_sensitive
def test_a_reject_needs_a_reason(client, alice, carol, troubleshooting, script):
    [approval] = park_writes(alice, troubleshooting, script)
    client.force_login(carol)
    refused = client.post(PENDING, {"action": "reject_selected", "_selected_action": [str(approval.pk)],
                                    "post": "yes", "reason": ""})
    assert refused.status_code == 200 and "A reason is required to reject." in refused.content.decode()
    assert PendingApproval.objects.get().status == ApprovalStatus.PENDING

    # The change page's answer form refuses the same way.
    form = client.post(f"{PENDING}{approval.pk}/resolve/", {"_reject": "Reject", "reason": ""})
    assert any("A reason is required to reject." in m for m in page_messages(form))
    assert PendingApproval.objects.get().status == ApprovalStatus.PENDING

    client.post(f"{PENDING}{approval.pk}/resolve/", {"_reject": "Reject", "reason": "not in prod"})
    approval.refresh_from_db()
    assert (approval.status, approval.reason) == (ApprovalStatus.REJECTED, "not in prod")


@flow
@pytest.mark.db_sensitive
def test_the_service_decides_who_may_resolve_and_its_refusal_is_reported(client, alice, root, troubleshooting, script):
    # A superuser without the approver role sees the page; the service still refuses the answer.
    [approval] = park_writes(alice, troubleshooting, script)
    client.force_login(root)
    done = client.post(PENDING, {"action": "approve_selected", "_selected_action": [str(approval.pk)],
                                 "post": "yes", "reason": "ok"})
    assert any("Only approvers resolve approvals." in m for m in page_messages(done))
    assert PendingApproval.objects.get().status == ApprovalStatus.PENDING
