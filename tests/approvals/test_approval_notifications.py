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
