"""``GET /api/audit/verify``: auditors only; a broken chain is a 200 with ``ok: false``."""

from __future__ import annotations

import pytest
from django.db import connection

from audit import chain
from audit.actors import Actor
from audit.services import chain_head_export, chain_head_record

pytestmark = pytest.mark.django_db
URL = "/api/audit/verify"


@pytest.mark.db_sensitive
def test_an_auditor_verifies_an_intact_chain(api, dave, audit_chain):
    events = audit_chain(50)
    head = chain_head_record(actor=Actor.user(dave))
    response = api(dave).get(URL)
    assert response.status_code == 200
    checked = response.json().pop("checked_head")
    assert (checked["seq"], checked["hash"], checked["source"], checked["age_seconds"] >= 0) == (
        51, head.hash, "database", True)
    assert {k: v for k, v in response.json().items() if k != "checked_head"} == {
        "ok": True,
        "rows": 51,
        "first_bad_seq": None,
        "reason": None,
        "head": {"seq": 51, "hash": head.hash},
        "recorded_head": chain_head_export(head=head),
    }
    assert head.seq == len(events) + 1


def test_an_empty_chain_verifies(api, dave):
    body = api(dave).get(URL).json()
    assert body == {"ok": True, "rows": 0, "first_bad_seq": None, "reason": None,
                    "head": {"seq": 0, "hash": chain.GENESIS}, "recorded_head": None, "checked_head": None}


@pytest.mark.db_sensitive
def test_a_tampered_chain_answers_ok_false_with_the_seq_and_the_reason(api, dave, audit_chain):
    audit_chain(50, head_at=50)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE audit_auditevent SET subject_id = 'other' WHERE seq = 17")
    body = api(dave).get(URL).json()
    assert (body["ok"], body["first_bad_seq"], body["reason"]) == (
        False, 17, "hash does not match the row's content"
    )
    assert body["head"]["seq"] == 16  # the last row that verified


@pytest.mark.parametrize("who", ["alice", "bob", "carol", "charlie"])
def test_it_refuses_everyone_without_the_auditor_role(api, request, who):
    response = api(request.getfixturevalue(who)).get(URL)
    assert response.status_code == 403
    assert response.json()["code"] == "permission_denied"


def test_it_refuses_anonymous_callers(api):
    response = api(None).get(URL)
    assert response.status_code == 401 and response.json()["code"] == "not_authenticated"


def test_the_schema_documents_the_body_and_the_errors(client):
    schema = client.get("/api/schema/", {"format": "json"}).json()
    operation = schema["paths"]["/api/audit/verify"]["get"]
    assert operation["operationId"] == "audit_verify"
    assert {"200", "401", "403"} <= set(operation["responses"])  # plus the request guard's, where installed
    body = schema["components"]["schemas"]["AuditVerify"]
    assert set(body["properties"]) == {"ok", "rows", "first_bad_seq", "reason", "head", "recorded_head",
                                       "checked_head"}
