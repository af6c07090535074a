"""``POST /api/policy/plan`` and ``POST /api/policy/apply``: the command's plan and apply over REST (issue 32)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User

from approvals.models import ApprovalRule
from approvals.policy_doc.export import policy_export
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.approvals.policy_fixtures import configure
from tests.conftest import make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(api: Any, alice: User) -> Any:
    configure(alice)
    return api(make_user("root", superuser=True))


def loosened() -> str:
    data = yaml.safe_load(policy_export()[0])
    data["rules"].append({"tool": "deploy", "action": "deny", "priority": 5})
    return yaml.safe_dump(data, sort_keys=False)


def test_plan_answers_what_the_command_prints_as_json_and_changes_nothing(admin_api):
    text, live = policy_export()
    response = admin_api.post("/api/policy/plan", {"document": loosened()}, format="json")
    assert response.status_code == 200, response.json()
    plan = response.json()
    assert plan["live_digest"] == live and plan["digest"] != live
    assert [(c["op"], c["subject"]) for c in plan["changes"]] == [("create", "rule")]
    assert plan["impact"]["days"] == 7 and set(plan) == {"live_digest", "digest", "changes", "warnings", "impact"}
    assert policy_export()[0] == text
    assert admin_api.post("/api/policy/plan", {"document": text, "impact": False},
                          format="json").json()["impact"] is None


def test_apply_with_the_plans_digest_applies_and_audits_the_caller(admin_api):
    document = loosened()
    live = admin_api.post("/api/policy/plan", {"document": document}, format="json").json()["live_digest"]
    response = admin_api.post("/api/policy/apply", {"document": document, "expect_digest": live}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["previous_digest"] == live
    assert response.json()["digest"] == policy_export()[1]
    assert ApprovalRule.objects.filter(tool_pattern="deploy", group__isnull=True).exists()
    applied = AuditEvent.objects.get(kind=AuditKind.POLICY_APPLIED)
    assert (applied.actor_type, applied.actor_id) == ("user", str(User.objects.get(username="root").pk))
    assert json.loads(applied.payload)["digest"] == response.json()["digest"]


def test_a_stale_digest_is_409_policy_changed_and_changes_nothing(admin_api):
    text, live = policy_export()
    response = admin_api.post("/api/policy/apply", {"document": loosened(), "expect_digest": "0" * 64},
                              format="json")
    assert (response.status_code, response.json()["code"]) == (409, "policy_changed")
    assert response.json()["extra"] == {"expected": "0" * 64, "live_digest": live}
    assert policy_export()[0] == text


def test_an_invalid_document_is_400_policy_invalid_naming_the_path(admin_api):
    text, _ = policy_export()
    data = yaml.safe_load(text)
    data["rules"][1]["priority"] = "soon"
    for path in ("/api/policy/plan", "/api/policy/apply"):
        response = admin_api.post(path, {"document": yaml.safe_dump(data, sort_keys=False)}, format="json")
        assert (response.status_code, response.json()["code"]) == (400, "policy_invalid")
        assert [p["path"] for p in response.json()["extra"]["problems"]] == ["rules[1].priority"]
    assert policy_export()[0] == text
    assert not AuditEvent.objects.filter(kind=AuditKind.POLICY_APPLIED).exists()


@pytest.mark.parametrize("document", ["rules: [", "[" * 5000, "just words", " "])
def test_a_document_that_is_not_a_policy_is_400_policy_invalid(admin_api, document):
    response = admin_api.post("/api/policy/plan", {"document": document}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "policy_invalid"), response.json()


def test_an_expect_digest_that_is_not_a_digest_is_refused_by_the_schema(admin_api):
    response = admin_api.post("/api/policy/apply", {"document": "version: 1", "expect_digest": "abc"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "invalid")
