"""An approval's notices reach a real receiver on loopback (issue 31): pending, escalated along the
chain, about to expire, expired; each once, each signed, each with the approval page's link."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine

from approvals.models import ApprovalStatus, PendingApproval
from audit.actors import Actor
from loop.providers.loopback import text_turn, tool_turn
from skald.core import clock
from skald.notifications.models import Delivery
from skald.notifications.services import subscription_create
from skald.sessions.services import session_message_submit
from skald.tasks import expire_approvals, sweep_notifications
from tests.notify_receiver import webhook_receiver

pytestmark = [pytest.mark.django_db(transaction=True)]

WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\npool exhausted\n"})
APPROVAL_EVENTS = ["approval.pending", "approval.escalated", "approval.expiring", "approval.expired"]


def hook(url: str, name: str, events: list[str], after: int | None = None, order: int = 0):
    return subscription_create(actor=Actor.system("test"), owner=None, data={
        "name": name, "channel": "webhook", "target": url, "events": events, "escalate_after_minutes": after,
        "chain_order": order})


def test_pending_escalated_expiring_expired_each_reach_the_receiver_once(alice, troubleshooting, script, settings):
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    settings.SKALD_PUBLIC_URL = "https://skald.example.org"
    with webhook_receiver() as first, webhook_receiver() as second:
        first.secret = hook(first.url, "approvers", APPROVAL_EVENTS, after=10).secret
        second.secret = hook(second.url, "leads", ["approval.escalated"], after=60, order=1).secret
        start = clock.now()

        def sweep_at(minutes: float) -> None:
            with time_machine.travel(start + timedelta(minutes=minutes), tick=False):
                sweep_notifications()

        with time_machine.travel(start, tick=False):
            script(tool_turn(WRITE), text_turn("the approval expired; stopping"))
            session_message_submit(user=alice, session=troubleshooting, content="investigate")
        approval = PendingApproval.objects.get()
        assert first.types() == ["approval.pending"] and second.types() == []
        (pending,) = first.accepted()
        assert pending.payload["link"] == f"https://skald.example.org/admin/approvals/pendingapproval/{approval.pk}/change/"
        assert pending.payload["requested_by"] == "alice" and pending.payload["data"]["tool"] == "write_file"

        sweep_at(5)
        assert first.types() == ["approval.pending"]
        sweep_at(11)
        sweep_at(12)
        assert first.types() == ["approval.pending", "approval.escalated"] and second.types() == []
        sweep_at(61)
        assert second.types() == ["approval.escalated"]  # the next step of the chain
        assert second.accepted()[0].payload["data"]["escalate_after_minutes"] == 60

        ttl_minutes = (approval.expires_at - start).total_seconds() / 60
        sweep_at(ttl_minutes - 30)  # inside the hour's warning
        sweep_at(ttl_minutes - 20)
        assert first.types()[-1] == "approval.expiring"
        with time_machine.travel(approval.expires_at + timedelta(minutes=1), tick=False):
            assert expire_approvals() == 1
            sweep_notifications()
        approval.refresh_from_db()
        assert approval.status == ApprovalStatus.EXPIRED

    assert first.types() == APPROVAL_EVENTS  # each once, in order
    assert second.types() == ["approval.escalated"]
    assert first.refused == [] and second.refused == []  # every signature verified
    assert len({r.webhook_id for r in first.received}) == 4
    assert Delivery.objects.filter(status="sent").count() == 5


def test_an_expired_approvals_requester_with_no_subscription_is_told_at_their_own_address(
        alice, troubleshooting, script, settings, mailoutbox):
    """Issue 31: the requester and the run's operator are told of an expiry even when they never set
    up a subscription: a personal one, at their own address, is made for them (they can disable it);
    someone who has a subscription of their own chose what they hear."""
    from skald.notifications.models import Subscription
    from skald.notifications.services import AUDIENCE_DEFAULT_NAME

    settings.SKALD_SYNC_TASKS = True
    alice.email = "alice@example.org"
    alice.save(update_fields=["email"])
    script(tool_turn(WRITE), text_turn("the approval expired; stopping"))
    session_message_submit(user=alice, session=troubleshooting, content="investigate")
    approval = PendingApproval.objects.get()
    assert mailoutbox == []  # nobody subscribed to pending approvals

    with time_machine.travel(approval.expires_at + timedelta(minutes=1), tick=False):
        assert expire_approvals() == 1
    [made] = Subscription.objects.filter(owner=alice)
    assert (made.name, made.channel, made.events, made.enabled) == (
        AUDIENCE_DEFAULT_NAME, "user_email", ["approval.expired"], True)
    [mail] = mailoutbox
    assert mail.to == ["alice@example.org"] and "expired" in mail.subject.lower()
    assert Delivery.objects.get(subscription=made).status == "sent"

    made.enabled = False  # she opts out: the next expiry tells her nothing, and nothing is made again
    made.save(update_fields=["enabled"])
    script(tool_turn(WRITE), text_turn("stopping"))
    session_message_submit(user=alice, session=troubleshooting, content="again")
    second = PendingApproval.objects.exclude(pk=approval.pk).get()
    with time_machine.travel(second.expires_at + timedelta(minutes=1), tick=False):
        assert expire_approvals() == 1
    assert len(mailoutbox) == 1 and Subscription.objects.filter(owner=alice).count() == 1
