"""Durable, signed, at-least-once delivery to a real receiver on loopback (issue 31)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.db import transaction

from audit.kinds import AuditKind
from audit.models import AuditEvent
from skald.core import clock
from skald.notifications import send
from skald.notifications.models import Delivery, DeliveryStatus, Subscription
from skald.notifications.services import notification_record
from skald.tasks import sweep_notifications
from tests.conftest import make_user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_jitter(monkeypatch):
    monkeypatch.setattr(send, "jitter", lambda: 1.0)  # the full backoff: a deterministic schedule


def sweep_after(minutes: float) -> None:
    """Let ``minutes`` pass, then run the sweep (it sends what is due)."""
    with time_machine.travel(clock.now() + timedelta(minutes=minutes), tick=False):
        sweep_notifications()


def test_it_delivers_a_signed_versioned_payload_with_a_deep_link(hook, receiver, event, settings):
    settings.SKALD_PUBLIC_URL = "https://skald.example.org"
    with transaction.atomic():
        (delivery,) = notification_record(event=event())
        assert receiver.received == []  # nothing leaves before the event commits
    (got,) = receiver.accepted()
    assert receiver.refused == []  # the library's own verifier accepted the signature
    assert got.webhook_id == delivery.webhook_id
    assert got.payload["version"] == "skald.notification.v1" and got.payload["type"] == "approval.pending"
    assert got.payload["link"] == "https://skald.example.org/admin/x/1/change/"
    assert got.payload["requested_by"] == "alice" and got.payload["risk"] == "medium"
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 1 and delivery.last_status_code == 204


def test_the_same_event_reaches_a_subscription_once(hook, receiver, event):
    notification_record(event=event())
    assert notification_record(event=event()) == []
    sweep_after(5)
    assert len(receiver.accepted()) == 1 and Delivery.objects.count() == 1


def test_a_receiver_that_fails_four_times_gets_it_on_the_fifth_with_one_id(hook, receiver, event):
    receiver.answers = [500, 503, 502, 500]
    notification_record(event=event())
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.FAILING
    hook.refresh_from_db()
    assert hook.failing and "500" in hook.last_error  # shown failing, with the last error
    waited = 0.0
    for attempt in range(1, 5):
        delivery.refresh_from_db()
        wait = (delivery.next_attempt_at - clock.now()).total_seconds() / 60
        assert wait == pytest.approx(0.5 * 2 ** (attempt - 1) + waited, rel=0.01)  # exponential backoff
        sweep_after(wait - waited - 0.1)  # not due yet: nothing is sent
        assert len(receiver.received) == attempt
        sweep_after(wait)
        waited = wait
    delivery.refresh_from_db()
    assert [r.answered for r in receiver.received] == [500, 503, 502, 500, 204]
    assert {r.webhook_id for r in receiver.received} == {delivery.webhook_id}  # one id, four retries
    assert delivery.status == DeliveryStatus.SENT and delivery.attempts == 5
    hook.refresh_from_db()
    assert not hook.failing


def test_a_receiver_that_never_answers_well_gets_a_dead_letter_retried_from_the_admin(
        hook, receiver, event, settings, client):
    settings.SKALD_NOTIFY_MAX_ATTEMPTS = 3
    receiver.otherwise = 500
    notification_record(event=event())
    sweep_after(10)
    sweep_after(30)
    delivery = Delivery.objects.get()
    assert delivery.status == DeliveryStatus.DEAD and delivery.attempts == 3
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_DELIVERY_DEAD).count() == 1
    sweep_after(600)
    assert len(receiver.received) == 3  # a dead letter is not retried by itself

    receiver.otherwise = 200
    root = make_user("root", superuser=True)
    client.force_login(root)
    page = client.post("/admin/skald/delivery/", {"action": "retry_deliveries", "_selected_action": [delivery.pk]})
    assert page.status_code == 302
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENT
    assert [r.webhook_id for r in receiver.received] == [delivery.webhook_id] * 4
    assert AuditEvent.objects.filter(kind=AuditKind.NOTIFY_DELIVERY_RETRIED).count() == 1


def test_a_crash_between_the_commit_and_the_send_is_delivered_by_the_sweep_once(hook, receiver, event, settings):
    settings.SKALD_SYNC_TASKS = False  # the enqueued send is lost with the worker: nothing runs it
    settings.SKALD_NOTIFY_SEND_AT_COMMIT = False  # nor does its own first attempt: it died first
    with transaction.atomic():
        notification_record(event=event())
    assert receiver.received == []
    settings.SKALD_SYNC_TASKS = True  # the restarted worker runs the sweep
    sweep_after(0)
    sweep_after(1)
    (got,) = receiver.received
    assert got.webhook_id == Delivery.objects.get().webhook_id


def test_a_second_worker_cannot_claim_a_delivery_being_sent(hook, receiver, event, settings):
    settings.SKALD_SYNC_TASKS = False
    settings.SKALD_NOTIFY_SEND_AT_COMMIT = False
    (delivery,) = notification_record(event=event())
    now = clock.now()
    assert send.claim(delivery.pk, now=now) is True
    assert send.claim(delivery.pk, now=now) is False
    assert send.delivery_send(delivery.pk) == "not due"


def test_a_disabled_subscription_hears_nothing(hook, receiver, event):
    Subscription.objects.filter(pk=hook.pk).update(enabled=False)
    assert notification_record(event=event()) == []


def test_metrics_count_sent_failed_and_dead_letters_and_time_the_delivery(hook, receiver, event, settings, client):
    settings.SKALD_NOTIFY_MAX_ATTEMPTS = 2
    receiver.answers = [500]
    notification_record(event=event(subject="approval:1"))  # fails once
    sweep_after(5)  # then delivered
    receiver.otherwise = 500
    notification_record(event=event(subject="approval:2"))
    sweep_after(10)  # a dead letter after two attempts
    lines = [line for line in client.get("/metrics").content.decode().splitlines() if "skald_notification" in line]
    assert 'skald_notifications_sent_total{channel="webhook"} 1.0' in lines
    assert 'skald_notifications_failed_attempts_total{channel="webhook"} 3.0' in lines
    assert 'skald_notifications_dead_lettered_total{channel="webhook"} 1.0' in lines
    assert "skald_notification_delivery_seconds_count 1.0" in lines
    assert 'skald_notification_delivery_seconds_bucket{le="+Inf"} 1.0' in lines


def test_a_message_due_to_a_subscription_disabled_since_is_a_dead_letter_at_once(hook, receiver, event, settings):
    settings.SKALD_SYNC_TASKS = False
    (delivery,) = notification_record(event=event())
    Subscription.objects.filter(pk=hook.pk).update(enabled=False)
    assert send.delivery_send(delivery.pk) == "dead"
    assert receiver.received == []
    hook.refresh_from_db()
    assert not hook.failing


def test_the_first_attempt_needs_no_worker_and_the_queued_task_then_finds_nothing_to_do(receiver, hook, settings):
    """Under load the queued task waits behind agent turns: the process that recorded the event makes
    the first attempt itself, right after the commit; the task, when a worker runs it, sends nothing."""
    from tests.e2e.stack import wait_for
    from tests.skald.notifications.conftest import approval_event

    settings.SKALD_SYNC_TASKS = False  # the task goes to the broker's queue, and no worker runs here
    settings.SKALD_NOTIFY_SEND_AT_COMMIT = True
    with transaction.atomic():
        [delivery] = notification_record(event=approval_event())
    wait_for(lambda: receiver.accepted() or None, timeout=30, what="the first attempt")  # a hang guard
    [message] = receiver.accepted()
    assert message.webhook_id == delivery.webhook_id and receiver.refused == []
    wait_for(lambda: Delivery.objects.get(pk=delivery.pk).status == DeliveryStatus.SENT or None, timeout=30,
             what="the attempt recorded")
    assert send.delivery_send(delivery.pk) == "not due"  # the queued task, once a worker runs it
    assert Delivery.objects.get(pk=delivery.pk).attempts == 1 and len(receiver.received) == 1
