"""Subscriptions and their outbox (issue 31). Written only through :mod:`skald.notifications.services`
and :mod:`skald.notifications.send`."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Channel(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (Standard Webhooks)"
    EMAIL = "email", "E-mail address"
    USER_EMAIL = "user_email", "My own e-mail address"
    SLACK = "slack", "Slack-compatible incoming webhook"
    TEAMS = "teams", "Teams-compatible incoming webhook"


class Risk(models.TextChoices):
    LOW = "low", "Low"
    MEDIUM = "medium", "Medium"
    HIGH = "high", "High"


class Subscription(models.Model):
    """Who hears of which events, where. ``owner`` empty: the organisation's (admins manage it)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="notification_subscriptions")
    name = models.CharField(max_length=80)
    channel = models.CharField(max_length=12, choices=Channel.choices)
    target = models.CharField(max_length=500, blank=True,
                              help_text="The receiver's URL, or the e-mail address (empty for your own address).")
    events = models.JSONField(default=list, help_text="Event kinds, e.g. approval.pending.")
    security_group = models.CharField(max_length=80, blank=True, help_text="Only this security group's calls.")
    agent = models.CharField(max_length=64, blank=True, help_text="Only this agent's events.")
    case = models.CharField(max_length=64, blank=True, help_text="Only this case's events (its id).")
    min_risk = models.CharField(max_length=8, choices=Risk.choices, default=Risk.LOW)
    escalate_after_minutes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="An escalation step: approval.escalated reaches it once an approval waited this long.")
    chain_order = models.PositiveSmallIntegerField(default=0, help_text="Its place in the escalation chain.")
    secret = models.CharField(max_length=80, editable=False, help_text="Standard Webhooks signing secret (whsec_…).")
    previous_secret = models.CharField(max_length=80, blank=True, editable=False)
    previous_secret_until = models.DateTimeField(null=True, blank=True, editable=False)
    enabled = models.BooleanField(default=True)
    failing = models.BooleanField(default=False, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    created_at = models.DateTimeField(editable=False)
    updated_at = models.DateTimeField(editable=False)

    class Meta:
        ordering = ["chain_order", "id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(escalate_after_minutes__isnull=True)
                                   | models.Q(escalate_after_minutes__gte=1), name="notify_escalation_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.channel})"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    FAILING = "failing", "Failing (will retry)"
    DEAD = "dead", "Dead letter"


class Delivery(models.Model):
    """One message to one subscription: the outbox row, written with the event it announces.

    ``webhook_id`` is fixed at creation and sent unchanged on every attempt, so a receiver
    de-duplicates retries by it.
    """

    event_id = models.UUIDField(db_index=True)
    kind = models.CharField(max_length=40)
    subject = models.CharField(max_length=120, help_text="What the event is about, e.g. approval:<request id>.")
    subscription = models.ForeignKey(Subscription, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=64, unique=True)
    payload = models.JSONField()
    status = models.CharField(max_length=8, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True, help_text="The last attempt's round trip.")
    event_at = models.DateTimeField()
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    delivered_after_ms = models.PositiveBigIntegerField(null=True, blank=True, help_text="From the event to delivery.")

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["kind", "subject", "subscription"], name="notify_once_per_subscription"),
        ]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notify_due")]

    def __str__(self) -> str:
        return f"{self.kind} → {self.subscription_id} ({self.status})"
