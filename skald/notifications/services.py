"""Every notification write: subscriptions (audited), the outbox rows an event adds, retries.

:func:`notification_record` runs inside the transaction of the change it announces: the outbox rows
commit or roll back with it, and the sends are enqueued only once it commits (SPEC R2: the database
is the source of truth for work, not the queue).
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core import clock
from skald.core.errors import Conflict
from skald.core.ids import new_uuid
from skald.core.queue import enqueue_on_commit
from skald.notifications.events import Event, EventKind, payload_for
from skald.notifications.fastpath import send_soon
from skald.notifications.models import Channel, Delivery, DeliveryStatus, Risk, Subscription
from skald.notifications.outbound import NotifyConfigError, screen_url
from skald.notifications.selectors import subscriptions_for

SUBSCRIPTION_FIELDS = ("name", "channel", "target", "events", "security_group", "agent", "case", "min_risk",
                       "escalate_after_minutes", "chain_order", "enabled")
EVENT_KINDS = tuple(str(kind) for kind in EventKind)
DELIVER_TASK = "skald.tasks.notify_deliver"


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


# --- events ---------------------------------------------------------------------------------------

def notification_record(*, event: Event) -> list[Delivery]:
    """Write one outbox row per subscription that hears ``event`` (in the caller's transaction) and
    send each once it commits. (kind, subject) reaches a subscription at most once: recording the
    same event again, from a redelivered task or a second sweep, adds nothing."""
    subscriptions = subscriptions_for(event)
    subscriptions += _audience_defaults(event, subscriptions)
    if not subscriptions:
        return []
    done = set(Delivery.objects.filter(kind=event.kind, subject=event.subject,
                                       subscription__in=subscriptions).values_list("subscription_id", flat=True))
    event_id = new_uuid()
    payload = payload_for(event, event_id=str(event_id), base_url=settings.SKALD_PUBLIC_URL)
    now = clock.now()
    added: list[Delivery] = []
    for subscription in subscriptions:
        if subscription.pk in done:
            continue
        try:
            with transaction.atomic():  # a savepoint: a concurrent sweep's row wins, the caller goes on
                delivery = Delivery.objects.create(
                    event_id=event_id, kind=event.kind, subject=event.subject[:120], subscription=subscription,
                    webhook_id=f"msg_{new_uuid().hex}", payload=payload, status=DeliveryStatus.PENDING,
                    next_attempt_at=now, event_at=event.occurred_at, created_at=now)
        except IntegrityError:
            continue
        enqueue_on_commit(DELIVER_TASK, delivery.pk, group="notify")
        transaction.on_commit(partial(send_soon, delivery.pk))  # the first attempt, without the queue's wait
        added.append(delivery)
    return added


AUDIENCE_DEFAULT_NAME = "My own address (made by Skald)"


def _audience_defaults(event: Event, heard: list[Subscription]) -> list[Subscription]:
    """The people an event is about (an expired approval's requester and its run's operator) are told
    even when they never set up a subscription: one who has none of their own gets a personal one for
    this kind of event, at their own e-mail address, made here (audited) and shown in the admin, where
    they can change or disable it. Someone with any subscription of their own chose what they hear."""
    if not event.audience:
        return []
    owners = {s.owner_id for s in heard}
    quiet = [uid for uid in event.audience if uid not in owners]
    if not quiet:
        return []
    configured = set(Subscription.objects.filter(owner_id__in=quiet).values_list("owner_id", flat=True))
    made: list[Subscription] = []
    for user in get_user_model().objects.filter(pk__in=[uid for uid in quiet if uid not in configured],
                                                is_active=True).exclude(email=""):
        made.append(subscription_create(actor=Actor.system("notifications"), owner=user, data={
            "name": AUDIENCE_DEFAULT_NAME, "channel": Channel.USER_EMAIL, "target": "", "events": [event.kind]}))
    return made


# --- subscriptions --------------------------------------------------------------------------------

def subscription_input_check(data: Mapping[str, Any], *, owner_id: int | None) -> dict[str, Any]:
    """The whole subscription checked (the admin's form runs it too); returns the cleaned fields.

    Raises:
        NotifyConfigError: with a stable code and the field it concerns.
    """
    unknown = set(data) - set(SUBSCRIPTION_FIELDS)
    if unknown:
        raise NotifyConfigError(f"unknown fields: {', '.join(sorted(unknown))}", code="notify_field_unknown")
    cleaned = dict(data)
    channel = cleaned.get("channel")
    if channel not in Channel.values:
        raise NotifyConfigError("channel must be one of " + ", ".join(Channel.values), code="notify_channel_invalid",
                                field="channel")
    events = cleaned.get("events")
    if not isinstance(events, list) or not events or any(e not in EVENT_KINDS for e in events):
        raise NotifyConfigError("events must be a non-empty list of " + ", ".join(EVENT_KINDS),
                                code="notify_events_invalid", field="events")
    cleaned["events"] = sorted(set(events))
    if cleaned.get("min_risk", Risk.LOW) not in Risk.values:
        raise NotifyConfigError("min_risk must be low, medium or high", code="notify_risk_invalid", field="min_risk")
    target = str(cleaned.get("target") or "")
    if channel == Channel.USER_EMAIL:
        if owner_id is None:
            raise NotifyConfigError("an organisation subscription has no own address: use email",
                                    code="notify_target_invalid", field="target")
        cleaned["target"] = ""
    elif channel == Channel.EMAIL:
        try:
            validate_email(target)
        except ValidationError:
            raise NotifyConfigError("target must be an e-mail address", code="notify_target_invalid",
                                    field="target") from None
    else:
        screen_url(target)
    after = cleaned.get("escalate_after_minutes")
    if after is not None and (not isinstance(after, int) or after < 1):
        raise NotifyConfigError("escalate_after_minutes must be a positive number of minutes",
                                code="notify_escalation_invalid", field="escalate_after_minutes")
    return cleaned


def _audit(actor: Actor, subscription: Subscription, action: str, **extra: Any) -> None:
    audit_append(actor=actor, kind=AuditKind.NOTIFY_SUBSCRIPTION_CHANGED, subject_type="subscription",
                 subject_id=subscription.pk,
                 payload={"action": action, "name": subscription.name, "channel": subscription.channel,
                          "owner": subscription.owner_id, "events": list(subscription.events), **extra})


def subscription_create(*, actor: Actor, owner: AbstractBaseUser | None, data: Mapping[str, Any]) -> Subscription:
    """Create a subscription for ``owner`` (None: the organisation's); its signing secret is new."""
    cleaned = subscription_input_check({"enabled": True, "min_risk": Risk.LOW, **data},
                                       owner_id=owner.pk if owner else None)
    now = clock.now()
    with transaction.atomic():
        subscription = Subscription.objects.create(owner_id=owner.pk if owner else None, secret=new_secret(),
                                                   created_at=now, updated_at=now, **cleaned)
        _audit(actor, subscription, "created")
    return subscription


def subscription_update(*, actor: Actor, subscription: Subscription, data: Mapping[str, Any]) -> Subscription:
    """Change the given fields; the result is checked whole (a channel change needs a fitting target)."""
    current = {name: getattr(subscription, name) for name in SUBSCRIPTION_FIELDS}
    cleaned = subscription_input_check({**current, **data}, owner_id=subscription.owner_id)
    changed = sorted(name for name in SUBSCRIPTION_FIELDS if cleaned.get(name) != current[name])
    with transaction.atomic():
        for name in changed:
            setattr(subscription, name, cleaned[name])
        subscription.updated_at = clock.now()
        subscription.save()
        _audit(actor, subscription, "updated", changed=changed)
    return subscription


def subscription_delete(*, actor: Actor, subscription: Subscription) -> None:
    with transaction.atomic():
        _audit(actor, subscription, "deleted")
        subscription.delete()


def subscription_rotate_secret(*, actor: Actor, subscription: Subscription) -> Subscription:
    """A new signing secret; the old one still signs alongside it for ``SKALD_NOTIFY_SECRET_GRACE_HOURS``
    (Standard Webhooks sends several signatures), so receivers can switch without a gap."""
    now = clock.now()
    with transaction.atomic():
        subscription.previous_secret = subscription.secret
        subscription.previous_secret_until = now + timedelta(hours=settings.SKALD_NOTIFY_SECRET_GRACE_HOURS)
        subscription.secret = new_secret()
        subscription.updated_at = now
        subscription.save(update_fields=["secret", "previous_secret", "previous_secret_until", "updated_at"])
        audit_append(actor=actor, kind=AuditKind.NOTIFY_SECRET_ROTATED, subject_type="subscription",
                     subject_id=subscription.pk, payload={"name": subscription.name,
                                                          "old_valid_until": now.isoformat()})
    return subscription


# --- dead letters ---------------------------------------------------------------------------------

def delivery_retry(*, actor: Actor, delivery_id: int) -> Delivery:
    """Send a dead letter (or a failing message) again now, with the same ``webhook-id``. One more
    attempt: if it fails too, it is a dead letter again.

    Raises:
        Conflict: ``notify_delivery_sent`` (nothing to retry).
    """
    with transaction.atomic():
        delivery = Delivery.objects.select_for_update().get(pk=delivery_id)
        if delivery.status == DeliveryStatus.SENT:
            raise Conflict("This message was delivered already.", code="notify_delivery_sent")
        was = delivery.status
        delivery.status = DeliveryStatus.PENDING if was == DeliveryStatus.DEAD else was
        delivery.next_attempt_at = clock.now()
        delivery.save(update_fields=["status", "next_attempt_at"])
        audit_append(actor=actor, kind=AuditKind.NOTIFY_DELIVERY_RETRIED, subject_type="delivery",
                     subject_id=delivery.pk, payload={"webhook_id": delivery.webhook_id, "was": was,
                                                      "attempts": delivery.attempts})
        enqueue_on_commit(DELIVER_TASK, delivery.pk, group="notify")
    return delivery
