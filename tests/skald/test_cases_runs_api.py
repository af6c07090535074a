"""Cases (operators write, others read) and runs over REST."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.actors import Actor
from skald.cases.services import case_create

pytestmark = pytest.mark.django_db


def test_operators_create_cases_with_logs_and_everyone_with_a_role_reads_them(alice, bob, charlie, api):
    created = api(alice).post("/api/cases/", {"title": "502s", "description": "after deploy",
                                              "logs": [{"name": "app.log", "content": "FATAL"}]}, format="json")
    assert created.status_code == 201, created.content
    case = created.json()
    assert case["logs"] == [{"id": case["logs"][0]["id"], "name": "app.log", "content": "FATAL"}]
    assert api(bob).get(f"/api/cases/{case['id']}/").json()["title"] == "502s"
    refused = api(bob).post("/api/cases/", {"title": "x"}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "permission_denied"
    assert api(charlie).get("/api/cases/").status_code == 403
    assert api(None).get("/api/cases/").status_code == 401


def test_a_case_update_is_audited_and_validated(alice, api):
    case = case_create(actor=Actor.system("t"), title="t")
    ok = api(alice).patch(f"/api/cases/{case.pk}/", {"status": "closed"}, format="json")
    assert ok.status_code == 200 and ok.json()["status"] == "closed"
    bad = api(alice).patch(f"/api/cases/{case.pk}/", {"status": "exploded"}, format="json")
    assert bad.status_code == 400 and bad.json()["code"] == "invalid" and "status" in bad.json()["extra"]["fields"]
    assert api(alice).get("/api/cases/999999/").json()["code"] == "case_not_found"


def test_listing_cases_does_not_grow_queries_with_cases(alice, api):
    for index in range(3):
        case_create(actor=Actor.system("t"), title=f"c{index}", logs=[("a", "1"), ("b", "2")])
    client = api(alice)
    with CaptureQueriesContext(connection) as few:
        client.get("/api/cases/")
    for index in range(6):
        case_create(actor=Actor.system("t"), title=f"d{index}", logs=[("a", "1")])
    with CaptureQueriesContext(connection) as many:
        client.get("/api/cases/")
    assert len(many) == len(few)


def test_unknown_runs_are_404_with_a_code(alice, api):
    response = api(alice).get("/api/runs/424242/")
    assert response.status_code == 404 and response.json()["code"] == "run_not_found"
    assert api(alice).get("/api/runs/").json() == []
