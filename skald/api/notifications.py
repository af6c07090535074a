"""``/api/notifications/subscriptions/…``: who hears of which events, where (issue 31).

Anyone holding a role manages their own subscriptions; admins (superusers) see and manage every
one, and alone create the organisation's (``organisation: true``). Views parse and delegate to
:mod:`skald.notifications.services` (the admin's services: same validation, same audit rows).
Another user's subscription answers 404, as if it did not exist.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from audit.actors import Actor
from skald.core.api.errors_schema import error_responses
from skald.core.api.permissions import caller, roles
from skald.core.api.strict_input import StrictInput
from skald.core.errors import Forbidden, NotFound, SkaldError
from skald.core.roles import Role
from skald.notifications.models import Channel, Delivery, DeliveryStatus, Risk, Subscription
from skald.notifications.selectors import subscriptions_visible_to
from skald.notifications.services import (
    EVENT_KINDS,
    delivery_retry,
    subscription_create,
    subscription_delete,
    subscription_update,
)

DELIVERY_LOG = 100


class AnyRole(roles(*Role)):  # type: ignore[misc]  # a class built by roles()
    """Holds a role, or is an admin (who may hold none)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        return bool(user and user.is_authenticated and user.is_superuser) or super().has_permission(request, view)


SAVE_CODES = ("invalid", "notify_invalid", "notify_channel_invalid", "notify_events_invalid", "notify_risk_invalid",
              "notify_target_invalid", "notify_url_invalid", "notify_ssrf_refused", "notify_escalation_invalid",
              "notify_allow_cidrs_invalid", "notify_field_unknown")


class SubscriptionInput(StrictInput):
    name = serializers.CharField(max_length=80)
    channel = serializers.ChoiceField(choices=Channel.values)
    target = serializers.CharField(max_length=500, required=False, allow_blank=True,
                                   help_text="webhook, slack, teams: the receiver's URL (SSRF-screened); email: the "
                                             "address; user_email: empty (your own address).")
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_KINDS), min_length=1, max_length=20)
    security_group = serializers.CharField(max_length=80, required=False, allow_blank=True)
    agent = serializers.CharField(max_length=64, required=False, allow_blank=True)
    case = serializers.CharField(max_length=64, required=False, allow_blank=True)
    min_risk = serializers.ChoiceField(choices=Risk.values, required=False)
    escalate_after_minutes = serializers.IntegerField(min_value=1, max_value=100000, required=False, allow_null=True,
                                                      help_text="An escalation step: told of approval.escalated "
                                                                "once an approval waited this long.")
    chain_order = serializers.IntegerField(min_value=0, max_value=1000, required=False)
    enabled = serializers.BooleanField(required=False)
    organisation = serializers.BooleanField(required=False, help_text="Admins only, at creation: the "
                                                                      "organisation's subscription (no owner).")


class SubscriptionView(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    owner = serializers.IntegerField(allow_null=True, help_text="The owning user's id; null: the organisation's.")
    channel = serializers.ChoiceField(choices=Channel.values)
    target = serializers.CharField(allow_blank=True)
    events = serializers.ListField(child=serializers.ChoiceField(choices=EVENT_KINDS))
    security_group = serializers.CharField(allow_blank=True)
    agent = serializers.CharField(allow_blank=True)
    case = serializers.CharField(allow_blank=True)
    min_risk = serializers.ChoiceField(choices=Risk.values)
    escalate_after_minutes = serializers.IntegerField(allow_null=True)
    chain_order = serializers.IntegerField()
    enabled = serializers.BooleanField()
    secret = serializers.CharField(help_text="The Standard Webhooks signing secret (whsec_…).")
    failing = serializers.BooleanField(help_text="The last attempt to reach the receiver failed.")
    last_error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class DeletedSubscription(serializers.Serializer):
    id = serializers.IntegerField()
    deleted = serializers.BooleanField()


def subscription_view(s: Subscription) -> dict[str, Any]:
    return {"id": s.pk, "name": s.name, "owner": s.owner_id, "channel": s.channel, "target": s.target,
            "events": list(s.events), "security_group": s.security_group, "agent": s.agent, "case": s.case,
            "min_risk": s.min_risk, "escalate_after_minutes": s.escalate_after_minutes, "chain_order": s.chain_order,
            "enabled": s.enabled, "secret": s.secret, "failing": s.failing, "last_error": s.last_error,
            "created_at": s.created_at, "updated_at": s.updated_at}


def _errors(**by_status: tuple[str, ...] | str) -> dict[int, Any]:
    return error_responses(authenticated=True, **by_status)  # type: ignore[arg-type]  # keys are _<status>


def _visible(request: Request, subscription_id: int) -> Subscription:
    subscription = subscriptions_visible_to(caller(request)).filter(pk=subscription_id).first()
    if subscription is None:
        raise NotFound("no such subscription", code="subscription_not_found")
    return subscription


def _parsed(request: Request, *, partial: bool = False) -> dict[str, Any]:
    body = SubscriptionInput(data=request.data, partial=partial)
    body.is_valid(raise_exception=True)
    return dict(body.validated_data)


class SubscriptionList(APIView):
    permission_classes = [AnyRole]

    @extend_schema(operation_id="notification_subscription_list", summary="List your subscriptions (admins: all)",
                   responses={200: SubscriptionView(many=True), **_errors()})
    def get(self, request: Request) -> Response:
        return Response([subscription_view(s) for s in subscriptions_visible_to(caller(request))])

    @extend_schema(operation_id="notification_subscription_create", summary="Subscribe to events",
                   description="The receiver URL passes the SSRF screen (a private range needs "
                               "`SKALD_NOTIFY_ALLOW_CIDRS`). The answer carries the new signing secret.",
                   request=SubscriptionInput, responses={201: SubscriptionView, **_errors(
                       _400=SAVE_CODES, _403="admin_required")})
    def post(self, request: Request) -> Response:
        data = _parsed(request)
        user = caller(request)
        organisation = data.pop("organisation", False)
        if organisation and not getattr(user, "is_superuser", False):
            raise Forbidden("Only an administrator creates the organisation's subscriptions.", code="admin_required")
        subscription = subscription_create(actor=Actor.user(user), owner=None if organisation else user, data=data)
        return Response(subscription_view(subscription), status=status.HTTP_201_CREATED)


class SubscriptionDetail(APIView):
    permission_classes = [AnyRole]

    @extend_schema(operation_id="notification_subscription_get", summary="Read a subscription",
                   responses={200: SubscriptionView, **_errors(_404="subscription_not_found")})
    def get(self, request: Request, subscription_id: int) -> Response:
        return Response(subscription_view(_visible(request, subscription_id)))

    @extend_schema(operation_id="notification_subscription_update", summary="Change a subscription",
                   description="Only the fields given change; the result is checked whole.",
                   request=SubscriptionInput(partial=True), responses={200: SubscriptionView, **_errors(
                       _400=(*SAVE_CODES, "notify_owner_immutable"), _404="subscription_not_found")})
    def patch(self, request: Request, subscription_id: int) -> Response:
        data = _parsed(request, partial=True)  # a malformed body is refused before the row is looked up
        subscription = _visible(request, subscription_id)
        if "organisation" in data:
            raise SkaldError("organisation is set at creation only", code="notify_owner_immutable",
                             fields={"organisation": ["set at creation only"]})
        saved = subscription_update(actor=Actor.user(caller(request)), subscription=subscription, data=data)
        return Response(subscription_view(saved))

    @extend_schema(operation_id="notification_subscription_delete", summary="Delete a subscription and its log",
                   responses={200: DeletedSubscription, **_errors(_404="subscription_not_found")})
    def delete(self, request: Request, subscription_id: int) -> Response:
        subscription = _visible(request, subscription_id)
        subscription_delete(actor=Actor.user(caller(request)), subscription=subscription)
        return Response({"id": subscription_id, "deleted": True})


class DeliveryView(serializers.Serializer):
    id = serializers.IntegerField()
    webhook_id = serializers.CharField(help_text="Sent unchanged on every attempt (the webhook-id header).")
    event_id = serializers.UUIDField()
    type = serializers.ChoiceField(choices=EVENT_KINDS)
    subject = serializers.CharField()
    status = serializers.ChoiceField(choices=DeliveryStatus.values)
    attempts = serializers.IntegerField()
    next_attempt_at = serializers.DateTimeField()
    last_status_code = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField(allow_blank=True)
    latency_ms = serializers.IntegerField(allow_null=True)
    created_at = serializers.DateTimeField()
    sent_at = serializers.DateTimeField(allow_null=True)


def delivery_view(d: Delivery) -> dict[str, Any]:
    return {"id": d.pk, "webhook_id": d.webhook_id, "event_id": d.event_id, "type": d.kind, "subject": d.subject,
            "status": d.status, "attempts": d.attempts, "next_attempt_at": d.next_attempt_at,
            "last_status_code": d.last_status_code, "last_error": d.last_error, "latency_ms": d.latency_ms,
            "created_at": d.created_at, "sent_at": d.sent_at}


class SubscriptionDeliveries(APIView):
    permission_classes = [AnyRole]

    @extend_schema(operation_id="notification_delivery_list", summary="A subscription's delivery log (latest 100)",
                   responses={200: DeliveryView(many=True), **_errors(_404="subscription_not_found")})
    def get(self, request: Request, subscription_id: int) -> Response:
        subscription = _visible(request, subscription_id)
        return Response([delivery_view(d) for d in subscription.deliveries.order_by("-id")[:DELIVERY_LOG]])


class DeliveryRetry(APIView):
    permission_classes = [AnyRole]

    @extend_schema(operation_id="notification_delivery_retry", summary="Send a dead letter again now",
                   description="Same webhook-id; one more attempt (a dead letter again if it fails).",
                   request=None, responses={200: DeliveryView, **_errors(_404="delivery_not_found",
                                                                         _409="notify_delivery_sent")})
    def post(self, request: Request, delivery_id: int) -> Response:
        visible = subscriptions_visible_to(caller(request))
        if not Delivery.objects.filter(pk=delivery_id, subscription__in=visible).exists():
            raise NotFound("no such delivery", code="delivery_not_found")
        delivery = delivery_retry(actor=Actor.user(caller(request)), delivery_id=delivery_id)
        delivery.refresh_from_db()
        return Response(delivery_view(delivery))


__all__ = ["DeliveryRetry", "SubscriptionDeliveries", "SubscriptionDetail", "SubscriptionList"]
