"""Tripwire patterns and allow-list entries over the policy API (issue 32): CRUD through the admin's
services, ETag / If-Match, admins only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.models import TripwireAllowEntry, TripwirePattern
from audit.kinds import AuditKind
from audit.models import AuditEvent
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

PATTERNS = "/api/policy/tripwires/patterns/"
ALLOW = "/api/policy/tripwires/allow/"


@pytest.fixture
def admin_api(api: Any) -> Any:
    return api(make_user("root", superuser=True))


def last_audit(kind: AuditKind) -> dict[str, Any]:
    event = AuditEvent.objects.filter(kind=kind).order_by("seq").last()
    assert event is not None
    return json.loads(event.payload)


def test_a_pattern_round_trips_through_the_service_with_etags(admin_api):
    created = admin_api.post(PATTERNS, {"name": "acme-key", "regex": "ACME-[0-9A-F]{16}", "keywords": "acme-"},
                             format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert created["ETag"] == body["etag"] and body["note"] == "" and body["enabled"] is True
    assert last_audit(AuditKind.TRIPWIRE_PATTERN_CHANGED)["created"] is True
    url = f"{PATTERNS}{body['id']}/"
    assert admin_api.get(url).json() == body
    assert admin_api.get(PATTERNS).json() == [body]

    assert admin_api.patch(url, {"enabled": False}, format="json").status_code == 428
    changed = admin_api.patch(url, {"enabled": False}, format="json", HTTP_IF_MATCH=body["etag"])
    assert changed.status_code == 200 and changed.json()["enabled"] is False
    assert last_audit(AuditKind.TRIPWIRE_PATTERN_CHANGED)["changed"] == ["enabled"]
    stale = admin_api.delete(url, HTTP_IF_MATCH=body["etag"])
    assert (stale.status_code, stale.json()["code"]) == (412, "precondition_failed")

    gone = admin_api.delete(url, HTTP_IF_MATCH=changed["ETag"])
    assert gone.status_code == 200 and gone.json()["deleted"] is True
    assert not TripwirePattern.objects.exists()
    assert last_audit(AuditKind.TRIPWIRE_PATTERN_CHANGED)["deleted"] is True


def test_a_pattern_the_detector_would_refuse_is_refused_by_field(admin_api):
    response = admin_api.post(PATTERNS, {"name": "greedy", "regex": "(a+)+$"}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "tripwire_pattern_invalid")
    assert "regex" in response.json()["extra"]["fields"]
    admin_api.post(PATTERNS, {"name": "k", "regex": "K-[0-9]{8}"}, format="json")
    taken = admin_api.post(PATTERNS, {"name": "k", "regex": "K-[0-9]{9}"}, format="json")
    assert (taken.status_code, taken.json()["code"]) == (409, "tripwire_pattern_name_taken")


def test_an_allow_entry_round_trips_with_its_reason(admin_api):
    created = admin_api.post(ALLOW, {"regex": "ACME-0{16}", "reason": "the documented example key"}, format="json")
    assert created.status_code == 201, created.json()
    url = f"{ALLOW}{created.json()['id']}/"
    changed = admin_api.patch(url, {"reason": "docs"}, format="json", HTTP_IF_MATCH=created["ETag"])
    assert changed.status_code == 200 and changed.json()["reason"] == "docs"
    assert last_audit(AuditKind.TRIPWIRE_ALLOW_CHANGED)["entry"]["reason"] == "docs"
    assert admin_api.delete(url, HTTP_IF_MATCH=changed["ETag"]).status_code == 200
    assert not TripwireAllowEntry.objects.exists()
    assert admin_api.get(url).json()["code"] == "tripwire_allow_not_found"


def test_the_tripwire_routes_are_for_admins_only(api, alice: User, carol: User):
    for user in (alice, carol):
        for path in (PATTERNS, ALLOW):
            response = api(user).get(path)
            assert (response.status_code, response.json()["code"]) == (403, "admin_required")
