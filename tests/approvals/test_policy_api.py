"""The policy REST API (issue 32): rules and groups CRUD for admins, through the admin's services,
with ETag / If-Match."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from approvals.models import ApprovalRule, SecurityGroup
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.approvals.policy_fixtures import configure
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def root(db: None) -> User:
    return make_user("root", superuser=True)


@pytest.fixture
def admin_api(api: Any, root: User) -> Any:
    return api(root)


def audits(kind: AuditKind) -> list[dict[str, Any]]:
    return [json.loads(e.payload) for e in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def rule_audits() -> list[dict[str, Any]]:
    return audits(AuditKind.RULE_CHANGED)


def test_it_creates_reads_changes_and_deletes_a_rule_through_the_service(admin_api, alice):
    configure(alice)
    created = admin_api.post("/api/policy/rules/", {"group": "ops", "tool_pattern": " deploy ", "action": "deny",
                                                     "priority": 7, "arg_matchers": {"env": "prod*"},
                                                     "approval_ttl": 600, "note": "never deploy"}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert created["ETag"] == body["etag"]
    assert body | {"id": 0, "etag": ""} == {
        "id": 0, "group": "ops", "tool_pattern": "deploy", "arg_matchers": {"env": "prod*"}, "action": "deny",
        "priority": 7, "approval_ttl": 600, "enabled": True, "note": "never deploy", "hit_count": 0, "etag": ""}
    assert rule_audits()[-1]["created"] is True and rule_audits()[-1]["rule"]["tool_pattern"] == "deploy"

    url = f"/api/policy/rules/{body['id']}/"
    read = admin_api.get(url)
    assert read.status_code == 200 and read["ETag"] == body["etag"] and read.json() == body

    changed = admin_api.patch(url, {"action": "require", "group": None}, format="json", HTTP_IF_MATCH=body["etag"])
    assert changed.status_code == 200, changed.json()
    assert changed.json()["action"] == "require" and changed.json()["group"] is None
    assert changed["ETag"] != body["etag"]
    assert rule_audits()[-1]["changed"] == ["action", "group"]

    audits = len(rule_audits())
    same = admin_api.patch(url, {"action": "require"}, format="json", HTTP_IF_MATCH=changed["ETag"])
    assert same.status_code == 200 and same["ETag"] == changed["ETag"]
    assert len(rule_audits()) == audits  # nothing changed, nothing audited

    gone = admin_api.delete(url, HTTP_IF_MATCH=changed["ETag"])
    was = {key: value for key, value in changed.json().items() if key != "etag"}
    assert (gone.status_code, gone.json()) == (200, {**was, "deleted": True})
    assert not ApprovalRule.objects.filter(pk=body["id"]).exists()
    assert rule_audits()[-1]["deleted"] is True
    assert admin_api.get(url).json()["code"] == "rule_not_found"


def test_the_list_carries_each_rules_etag_in_a_fixed_number_of_queries(admin_api, alice):
    configure(alice)
    with CaptureQueriesContext(connection) as queries:
        listed = admin_api.get("/api/policy/rules/")
    assert listed.status_code == 200
    rules = listed.json()
    assert len(rules) == ApprovalRule.objects.count()
    assert [r["group"] for r in rules][-2:] == ["ops", "ops"]  # global first
    one = admin_api.get(f"/api/policy/rules/{rules[0]['id']}/")
    assert one["ETag"] == rules[0]["etag"]
    assert len(queries.captured_queries) <= 4, [q["sql"] for q in queries.captured_queries]


def test_a_rule_the_service_refuses_is_refused_by_field(admin_api):
    response = admin_api.post("/api/policy/rules/", {"tool_pattern": "x", "action": "maybe"}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid"
    assert "action" in response.json()["extra"]["fields"]


def test_a_rule_naming_a_group_that_does_not_exist_is_404_group_unknown(admin_api):
    response = admin_api.post("/api/policy/rules/", {"group": "nobody", "tool_pattern": "x", "action": "deny"},
                              format="json")
    assert (response.status_code, response.json()["code"]) == (404, "group_unknown")
    assert not ApprovalRule.objects.filter(tool_pattern="x").exists()


def test_a_write_without_if_match_is_428_and_a_stale_one_412_and_changes_nothing(admin_api, alice):
    configure(alice)
    rule = ApprovalRule.objects.get(tool_pattern="execute_cmd", group__name="ops")
    url = f"/api/policy/rules/{rule.pk}/"
    etag = admin_api.get(url)["ETag"]
    missing = admin_api.patch(url, {"priority": 1}, format="json")
    assert (missing.status_code, missing.json()["code"]) == (428, "precondition_required")
    assert admin_api.delete(url).status_code == 428

    assert admin_api.patch(url, {"priority": 2}, format="json", HTTP_IF_MATCH=etag).status_code == 200
    stale = admin_api.patch(url, {"priority": 3}, format="json", HTTP_IF_MATCH=etag)
    assert (stale.status_code, stale.json()["code"]) == (412, "precondition_failed")
    assert admin_api.delete(url, HTTP_IF_MATCH=etag).status_code == 412
    assert admin_api.patch(url, {"priority": 3}, format="json", HTTP_IF_MATCH="W/" + etag).status_code == 412
    rule.refresh_from_db()
    assert rule.priority == 2


def test_a_hit_does_not_change_a_rules_etag(admin_api, alice):
    configure(alice)
    rule = ApprovalRule.objects.get(tool_pattern="execute_cmd", group__name="ops")
    url = f"/api/policy/rules/{rule.pk}/"
    etag = admin_api.get(url)["ETag"]
    ApprovalRule.objects.filter(pk=rule.pk).update(hit_count=41)
    assert admin_api.get(url)["ETag"] == etag


def test_it_creates_changes_and_deletes_a_group_with_members_and_rules(admin_api, alice, bob):
    configure(alice)
    created = admin_api.post("/api/policy/groups/", {"name": "night", "description": "Night shift",
                                                      "users": ["alice", "bob"], "agents": ["troubleshooter"]},
                             format="json")
    assert created.status_code == 201, created.json()
    group = created.json()
    assert (group["users"], group["agents"], group["rules"]) == (["alice", "bob"], ["troubleshooter"], [])
    audit = audits(AuditKind.GROUP_CHANGED)[-1]
    assert audit["created"] is True and audit["users"] == [alice.pk, bob.pk]

    url = f"/api/policy/groups/{group['id']}/"
    admin_api.post("/api/policy/rules/", {"group": "night", "tool_pattern": "*", "action": "require"}, format="json")
    stale = admin_api.patch(url, {"users": ["bob"]}, format="json", HTTP_IF_MATCH=group["etag"])
    assert stale.status_code == 412  # a rule was added: the group's version covers its rules

    fresh = admin_api.get(url)
    assert [r["tool_pattern"] for r in fresh.json()["rules"]] == ["*"]
    changed = admin_api.patch(url, {"users": ["bob"], "name": "nights"}, format="json", HTTP_IF_MATCH=fresh["ETag"])
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["name"], changed.json()["users"]) == ("nights", ["bob"])
    assert audits(AuditKind.GROUP_CHANGED)[-1]["changed"] == ["name", "users"]

    gone = admin_api.delete(url, HTTP_IF_MATCH=changed["ETag"])
    assert gone.status_code == 200 and [r["tool_pattern"] for r in gone.json()["rules"]] == ["*"]
    assert not SecurityGroup.objects.filter(name="nights").exists()
    assert not ApprovalRule.objects.filter(group__isnull=False, tool_pattern="*").exists()


def test_group_refusals_name_what_is_wrong(admin_api, alice):
    configure(alice)
    taken = admin_api.post("/api/policy/groups/", {"name": "ops"}, format="json")
    assert (taken.status_code, taken.json()["code"]) == (409, "group_name_taken")
    nobody = admin_api.post("/api/policy/groups/", {"name": "x", "users": ["zed"]}, format="json")
    assert (nobody.status_code, nobody.json()["code"], nobody.json()["extra"]) == (404, "user_unknown",
                                                                                  {"users": ["zed"]})
    ghost = admin_api.post("/api/policy/groups/", {"name": "x", "agents": ["ghost"]}, format="json")
    assert (ghost.status_code, ghost.json()["code"]) == (404, "agent_unknown")
    assert not SecurityGroup.objects.filter(name="x").exists()


def test_the_group_list_costs_a_fixed_number_of_queries(admin_api, alice):
    configure(alice)
    for name in ("a", "b", "c"):
        admin_api.post("/api/policy/groups/", {"name": name, "users": ["alice"]}, format="json")
    with CaptureQueriesContext(connection) as queries:
        listed = admin_api.get("/api/policy/groups/")
    assert [g["name"] for g in listed.json()] == ["a", "b", "c", "ops"]
    assert len(queries.captured_queries) <= 8


@pytest.mark.parametrize("method,path", [
    ("get", "/api/policy/rules/"), ("post", "/api/policy/rules/"), ("get", "/api/policy/groups/"),
    ("post", "/api/policy/groups/"), ("post", "/api/policy/plan"), ("post", "/api/policy/apply"),
])
def test_a_user_who_is_not_an_admin_is_refused_with_a_code(api, alice, carol, method, path):
    for user in (alice, carol):  # an operator, an approver: roles are not admin
        response = getattr(api(user), method)(path, {}, format="json")
        assert (response.status_code, response.json()["code"]) == (403, "admin_required"), (user, path)
