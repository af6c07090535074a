"""The notification pages: own subscriptions for everyone with admin access, the organisation's for
superusers; the delivery log and a failing receiver's last error on the subscription's page."""

from __future__ import annotations

import pytest

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.notifications.models import Subscription
from skald.notifications.services import notification_record, subscription_create
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db(transaction=True)]
PAGES = "/admin/skald/subscription/"


def form(**overrides) -> dict:
    return {"name": "mine", "channel": "email", "target": "carol@example.org", "events": ["approval.pending"],
            "security_group": "", "agent": "", "case": "", "min_risk": "low", "escalate_after_minutes": "",
            "chain_order": "0", "enabled": "on", **overrides}


def test_a_user_adds_their_own_subscription_and_sees_only_their_own(client, carol, bob):
    other = subscription_create(actor=Actor.user(bob), owner=bob, data={
        "name": "bob's", "channel": "email", "target": "bob@example.org", "events": ["proposal.pending"]})
    client.force_login(carol)
    added = client.post(PAGES + "add/", form())
    assert added.status_code == 302, added.content[:2000]
    mine = Subscription.objects.get(name="mine")
    assert mine.owner_id == carol.pk and mine.secret.startswith("whsec_")
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_SUBSCRIPTION_CHANGED).count() == 2
    listing = client.get(PAGES).content.decode()
    assert "mine" in listing and "bob&#x27;s" not in listing and "bob's" not in listing
    assert client.get(f"{PAGES}{other.pk}/change/").status_code in (302, 403, 404)


def test_a_refused_receiver_is_an_error_on_the_form_not_a_row(client, carol, settings):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = ""
    client.force_login(carol)
    page = client.post(PAGES + "add/", form(channel="webhook", target="https://10.0.0.1/h"))
    assert page.status_code == 200 and "notify_ssrf_refused" in page.content.decode()
    assert not Subscription.objects.exists()


def test_the_subscription_page_shows_the_failing_receiver_and_its_delivery_log(client, event, loopback_allowed):
    root = make_user("root", superuser=True)
    hook = subscription_create(actor=Actor.user(root), owner=None, data={
        "name": "down", "channel": "webhook", "target": "http://127.0.0.1:9/closed", "events": ["approval.pending"]})
    notification_record(event=event())  # nothing listens on port 9: the attempt fails
    client.force_login(root)
    page = client.get(f"{PAGES}{hook.pk}/change/").content.decode()
    assert "provider_transport" in page and "approval.pending" in page and "failing" in page
    assert "failing: provider_transport" in client.get(PAGES).content.decode()
