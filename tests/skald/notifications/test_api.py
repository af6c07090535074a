"""``/api/notifications/subscriptions/…``: own subscriptions for everyone with a role, all for admins,
stable codes for bad input, an audit row for every change, the payload schema in the document."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.notifications.events import EventKind
from skald.notifications.models import Subscription
from skald.notifications.schema import EVENT_TYPES
from skald.notifications.services import notification_record
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db(transaction=True)]
LIST = "/api/notifications/subscriptions/"
HOOK = {"name": "my hook", "channel": "webhook", "target": "http://127.0.0.1:9/h", "events": ["approval.pending"]}


@pytest.fixture
def root(db: None) -> Any:
    return make_user("root", superuser=True)


def test_a_user_manages_their_own_subscriptions_and_sees_no_one_elses(api, carol, bob, loopback_allowed):
    mine = api(carol).post(LIST, HOOK, format="json")
    assert mine.status_code == 201, mine.content
    body = mine.json()
    assert body["owner"] == carol.pk and body["secret"].startswith("whsec_") and body["min_risk"] == "low"
    assert [s["id"] for s in api(carol).get(LIST).json()] == [body["id"]]
    assert api(bob).get(LIST).json() == []
    for method in ("get", "patch", "delete"):
        response = getattr(api(bob), method)(f"{LIST}{body['id']}/", {}, format="json")
        assert (response.status_code, response.json()["code"]) == (404, "subscription_not_found")

    changed = api(carol).patch(f"{LIST}{body['id']}/", {"min_risk": "high", "enabled": False}, format="json")
    assert changed.status_code == 200 and changed.json()["min_risk"] == "high" and not changed.json()["enabled"]
    gone = api(carol).delete(f"{LIST}{body['id']}/")
    assert gone.json() == {"id": body["id"], "deleted": True}
    actions = [json.loads(row.payload)["action"]
               for row in AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SUBSCRIPTION_CHANGED).order_by("seq")]
    assert actions == ["created", "updated", "deleted"]


def test_an_admin_sees_all_and_alone_creates_the_organisations(api, carol, root, loopback_allowed):
    refused = api(carol).post(LIST, {**HOOK, "organisation": True}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "admin_required")
    api(carol).post(LIST, HOOK, format="json")
    org = api(root).post(LIST, {**HOOK, "organisation": True, "name": "ops"}, format="json").json()
    assert org["owner"] is None
    assert {s["name"] for s in api(root).get(LIST).json()} == {"my hook", "ops"}
    assert api(root).patch(f"{LIST}{org['id']}/", {"organisation": False}, format="json").json()["code"] \
        == "notify_owner_immutable"


def test_no_role_no_access(api, charlie):
    assert api(None).get(LIST).status_code == 401
    assert api(charlie).get(LIST).status_code == 403


@pytest.mark.parametrize(("body", "code"), [
    ({**HOOK, "target": "https://10.0.0.8/h"}, "notify_ssrf_refused"),
    ({**HOOK, "target": "ftp://example.org/"}, "notify_url_invalid"),
    ({**HOOK, "channel": "email", "target": "not an address"}, "notify_target_invalid"),
    ({**HOOK, "events": ["approval.whatever"]}, "invalid"),
    ({**HOOK, "events": []}, "invalid"),
    ({**HOOK, "channel": "pager"}, "invalid"),
    ({**HOOK, "escalate_after_minutes": 0}, "invalid"),
    ({**HOOK, "colour": "red"}, "unknown_field"),
])
def test_bad_input_answers_400_with_a_stable_code(api, carol, settings, body, code):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = ""
    response = api(carol).post(LIST, body, format="json")
    assert (response.status_code, response.json()["code"]) == (400, code), response.content
    assert not Subscription.objects.exists()


def test_an_own_email_subscription_needs_no_address_but_an_organisations_does(api, carol, root):
    own = api(carol).post(LIST, {"name": "me", "channel": "user_email", "events": ["approval.pending"]}, format="json")
    assert own.status_code == 201 and own.json()["target"] == ""
    org = api(root).post(LIST, {"name": "x", "channel": "user_email", "events": ["approval.pending"],
                                "organisation": True}, format="json")
    assert (org.status_code, org.json()["code"]) == (400, "notify_target_invalid")


def test_the_payload_schema_is_published_and_names_every_event(client):
    document = yaml.safe_load(client.get("/api/schema/").content)
    payload = document["components"]["schemas"]["NotificationPayload"]
    assert payload["required"] == list(payload["properties"]) and payload["properties"]["link"]["format"] == "uri"
    events = document["components"]["schemas"]["NotificationEventEnum"]["enum"]
    assert tuple(events) == EVENT_TYPES == tuple(str(k) for k in EventKind)
    assert "/api/notifications/subscriptions/{subscription_id}/" in document["paths"]


def test_the_delivery_log_and_a_dead_letters_retry_through_the_api(api, carol, bob, receiver, event, settings):
    settings.SKALD_NOTIFY_MAX_ATTEMPTS = 1
    receiver.otherwise = 500
    created = api(carol).post(LIST, {**HOOK, "target": receiver.url}, format="json").json()
    receiver.secret = created["secret"]
    notification_record(event=event())
    (row,) = api(carol).get(f"{LIST}{created['id']}/deliveries/").json()
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("dead", 1, 500)
    assert api(bob).get(f"{LIST}{created['id']}/deliveries/").json()["code"] == "subscription_not_found"
    assert api(bob).post(f"/api/notifications/deliveries/{row['id']}/retry").json()["code"] == "delivery_not_found"

    receiver.otherwise = 204
    retried = api(carol).post(f"/api/notifications/deliveries/{row['id']}/retry")
    assert retried.status_code == 200 and retried.json()["status"] == "sent"
    assert retried.json()["webhook_id"] == row["webhook_id"] == receiver.received[-1].webhook_id
    again = api(carol).post(f"/api/notifications/deliveries/{row['id']}/retry")
    assert (again.status_code, again.json()["code"]) == (409, "notify_delivery_sent")
