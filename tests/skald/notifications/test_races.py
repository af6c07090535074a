"""The outbox under contention (PostgreSQL too): a delivery due for many workers is sent once per
attempt; the same event recorded by concurrent sweeps is one row."""

from __future__ import annotations

import pytest

from skald.notifications import send
from skald.notifications.models import Delivery
from skald.notifications.services import notification_record
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def test_racing_workers_send_a_due_delivery_once(hook, receiver, event, settings):
    settings.SKALD_SYNC_TASKS = False  # the workers below are the only senders
    settings.SKALD_NOTIFY_SEND_AT_COMMIT = False
    (delivery,) = notification_record(event=event())
    results = race(4, lambda i: send.delivery_send(delivery.pk))
    assert sorted(results) == ["not due", "not due", "not due", "sent"]
    assert len(receiver.received) == 1
    delivery.refresh_from_db()
    assert delivery.attempts == 1


def test_racing_sweeps_record_the_same_event_once(hook, receiver, event, settings):
    settings.SKALD_SYNC_TASKS = False
    results = race(4, lambda i: len(notification_record(event=event())))
    assert sorted(results) == [0, 0, 0, 1], results
    assert Delivery.objects.count() == 1
