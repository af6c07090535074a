"""Carry one outbox row out: claim it, send it on its channel, record what happened.

At least once, never twice with a different id: the row's ``webhook-id`` is fixed when the event
is recorded. A claim is a compare-and-set on (status, next attempt time) that pushes the next
attempt one lease ahead, so two workers (a task and the sweep) never send the same row at once,
and a worker that dies mid-send leaves the row due again after the lease. A failed attempt waits
``base * 2**(attempts-1)`` seconds (capped), half of it jittered; after ``SKALD_NOTIFY_MAX_ATTEMPTS``
the row is a dead letter, retryable from the admin.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.db.models import F
from standardwebhooks import Webhook

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.errors import ProviderError
from loop.failpoints import failpoint
from skald.core import clock
from skald.notifications import outbound
from skald.notifications.models import Channel, Delivery, DeliveryStatus, Subscription
from skald.notifications.render import email_parts, slack_body, teams_body

logger = logging.getLogger(__name__)
jitter: Callable[[], float] = random.random  # injectable: tests make backoff deterministic
ERROR_LIMIT = 500


@dataclass(frozen=True)
class Attempt:
    ok: bool
    status_code: int | None
    error: str
    latency_ms: int


def retry_delay(attempts: int) -> float:
    """Seconds before attempt ``attempts + 1``: exponential, capped, the upper half jittered."""
    ceiling = min(settings.SKALD_NOTIFY_RETRY_CAP_SECONDS,
                  settings.SKALD_NOTIFY_RETRY_BASE_SECONDS * 2 ** max(attempts - 1, 0))
    return ceiling / 2 + jitter() * ceiling / 2


def _lease() -> timedelta:
    return timedelta(seconds=max(settings.SKALD_LEASE_SECONDS, 2 * settings.SKALD_NOTIFY_TIMEOUT_SECONDS))


def claim(delivery_id: int, *, now: datetime) -> bool:
    """Take the row for one attempt if it is due (a compare-and-set; the loser sees False)."""
    return bool(Delivery.objects.filter(pk=delivery_id, status__in=(DeliveryStatus.PENDING, DeliveryStatus.FAILING),
                                        next_attempt_at__lte=now)
                .update(next_attempt_at=now + _lease(), attempts=F("attempts") + 1))


def delivery_send(delivery_id: int) -> str:
    """Attempt one due delivery and record the outcome (the task and the sweep call this)."""
    failpoint("notify.before_send")  # the outbox row committed, nothing sent yet
    now = clock.now()
    if not claim(delivery_id, now=now):
        return "not due"
    failpoint("notify.after_claim")  # claimed, nothing sent: due again after the lease
    delivery = Delivery.objects.select_related("subscription", "subscription__owner").get(pk=delivery_id)
    if not delivery.subscription.enabled:
        attempt = Attempt(False, None, "the subscription is disabled", 0)
    else:
        attempt = _attempt(delivery)
    return _record(delivery, attempt)


def _attempt(delivery: Delivery) -> Attempt:
    started = time.perf_counter()
    try:
        status_code = _send(delivery)
    except ProviderError as exc:
        return Attempt(False, None, f"{exc.code}: {exc}"[:ERROR_LIMIT], _ms(started))
    except Exception as exc:  # noqa: BLE001  an SMTP refusal, a broken connection: the row records it, the sweep retries
        return Attempt(False, None, f"{type(exc).__name__}: {exc}"[:ERROR_LIMIT], _ms(started))
    ok = status_code is None or 200 <= status_code < 300
    return Attempt(ok, status_code, "" if ok else f"the receiver answered {status_code}", _ms(started))


def _ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)


def _send(delivery: Delivery) -> int | None:
    subscription = delivery.subscription
    payload = delivery.payload
    match subscription.channel:
        case Channel.WEBHOOK:
            body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
            return outbound.post(subscription.target, body, signed_headers(subscription, delivery.webhook_id, body)
                                 ).status_code
        case Channel.SLACK | Channel.TEAMS:
            chat = slack_body(payload) if subscription.channel == Channel.SLACK else teams_body(payload)
            body = json.dumps(chat).encode()
            headers = {"content-type": "application/json", "webhook-id": delivery.webhook_id}
            return outbound.post(subscription.target, body, headers).status_code
        case Channel.EMAIL | Channel.USER_EMAIL:
            address = subscription.target if subscription.channel == Channel.EMAIL else \
                getattr(subscription.owner, "email", "")
            if not address:
                raise ValueError("the subscriber has no e-mail address")
            subject, text, html = email_parts(payload)
            message = EmailMultiAlternatives(subject, text, settings.DEFAULT_FROM_EMAIL, [address],
                                             headers={"X-Skald-Webhook-Id": delivery.webhook_id})
            message.attach_alternative(html, "text/html")
            message.send()
            return None
    raise ValueError(f"unknown channel {subscription.channel}")


def signed_headers(subscription: Subscription, webhook_id: str, body: bytes) -> dict[str, str]:
    """Standard Webhooks headers; during a rotation's grace period both secrets sign."""
    at = clock.now()
    signatures = [Webhook(subscription.secret).sign(webhook_id, at, body)]
    if subscription.previous_secret and subscription.previous_secret_until and subscription.previous_secret_until > at:
        signatures.append(Webhook(subscription.previous_secret).sign(webhook_id, at, body))
    return {"content-type": "application/json", "user-agent": "Skald-Notifications/1",
            "webhook-id": webhook_id, "webhook-timestamp": str(int(at.timestamp())),
            "webhook-signature": " ".join(signatures)}


def _record(delivery: Delivery, attempt: Attempt) -> str:
    now = clock.now()
    open_rows = Delivery.objects.filter(pk=delivery.pk, status__in=(DeliveryStatus.PENDING, DeliveryStatus.FAILING))
    with transaction.atomic():
        if attempt.ok:
            open_rows.update(status=DeliveryStatus.SENT, sent_at=now, last_status_code=attempt.status_code,
                             last_error="", latency_ms=attempt.latency_ms,
                             delivered_after_ms=max(int((now - delivery.event_at).total_seconds() * 1000), 0))
            Subscription.objects.filter(pk=delivery.subscription_id, failing=True).update(failing=False)
            return "sent"
        disabled = not delivery.subscription.enabled  # nobody wants it any more: no retries
        dead = disabled or delivery.attempts >= settings.SKALD_NOTIFY_MAX_ATTEMPTS
        open_rows.update(status=DeliveryStatus.DEAD if dead else DeliveryStatus.FAILING,
                         next_attempt_at=now + timedelta(seconds=retry_delay(delivery.attempts)),
                         last_status_code=attempt.status_code, last_error=attempt.error,
                         latency_ms=attempt.latency_ms)
        if not disabled:  # a receiver failed, not a choice
            Subscription.objects.filter(pk=delivery.subscription_id).update(failing=True, last_error=attempt.error)
        if dead:
            audit_append(actor=Actor.system("notifications"), kind=AuditKind.NOTIFY_DELIVERY_DEAD,
                         subject_type="delivery", subject_id=delivery.pk,
                         payload={"webhook_id": delivery.webhook_id, "subscription": delivery.subscription_id,
                                  "attempts": delivery.attempts, "error": attempt.error[:200]})
    logger.warning("notification %s attempt %s failed: %s", delivery.webhook_id, delivery.attempts, attempt.error)
    return "dead" if dead else "failing"
