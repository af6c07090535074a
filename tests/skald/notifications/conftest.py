"""Fixtures for notifications: loopback receivers admitted by their CIDR, inline tasks, an event."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from audit.actors import Actor
from skald.core import clock
from skald.notifications.events import Event, EventKind
from skald.notifications.models import Subscription
from skald.notifications.services import subscription_create
from tests.notify_receiver import Receiver, webhook_receiver


@pytest.fixture(autouse=True)
def no_send_at_commit(settings: Any) -> None:
    """These tests play the workers and the sweep themselves: the committing process's own first
    attempt (fastpath) would race them. The test of that first attempt switches it back on."""
    settings.SKALD_NOTIFY_SEND_AT_COMMIT = False


@pytest.fixture
def loopback_allowed(settings: Any) -> None:
    settings.SKALD_NOTIFY_ALLOW_CIDRS = "127.0.0.0/8"
    settings.SKALD_SYNC_TASKS = True


@pytest.fixture
def receiver(loopback_allowed: None) -> Iterator[Receiver]:
    with webhook_receiver() as running:
        yield running


@pytest.fixture
def hook(receiver: Receiver, db: None) -> Subscription:
    """The organisation's webhook for approval events, its secret handed to the receiver."""
    subscription = subscription_create(actor=Actor.system("test"), owner=None, data={
        "name": "ops hook", "channel": "webhook", "target": receiver.url,
        "events": ["approval.pending", "approval.escalated", "approval.expiring", "approval.expired"]})
    receiver.secret = subscription.secret
    return subscription


def approval_event(kind: EventKind = EventKind.APPROVAL_PENDING, subject: str = "approval:1") -> Event:
    return Event(kind=kind, subject=subject, summary="write_file asks for approval", link_path="/admin/x/1/change/",
                 occurred_at=clock.now(), requested_by="alice", agent="troubleshooter")


@pytest.fixture
def event() -> Callable[..., Event]:
    return approval_event
