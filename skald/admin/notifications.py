"""The notification pages (issue 31): everyone with admin access manages their own subscriptions,
superusers the organisation's too. Each subscription shows its signing secret (with a rotate
action), whether its receiver is failing with the last error, and its delivery log (status,
attempts, latency, response code). Dead letters are sent again with an action.

Every write goes through :mod:`skald.notifications.services` (validated, audited).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from audit.actors import Actor
from skald.core.errors import SkaldError
from skald.notifications.models import Delivery, Subscription
from skald.notifications.services import (
    EVENT_KINDS,
    SUBSCRIPTION_FIELDS,
    delivery_retry,
    subscription_create,
    subscription_delete,
    subscription_input_check,
    subscription_rotate_secret,
    subscription_update,
)

LOG_ROWS = 50


def _own(request: HttpRequest) -> dict[str, Any]:
    return {} if request.user.is_superuser else {"owner_id": request.user.pk}


class _Staff:
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_staff)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request) and (obj is None or _mine(request, obj))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_view_permission(request, obj)


def _mine(request: HttpRequest, obj: Any) -> bool:
    subscription = obj if isinstance(obj, Subscription) else obj.subscription
    return bool(request.user.is_superuser or subscription.owner_id == request.user.pk)


class SubscriptionForm(forms.ModelForm):
    owner_default: Any = None  # set per request by SubscriptionAdmin.get_form
    events = forms.MultipleChoiceField(choices=[(k, k) for k in EVENT_KINDS], widget=forms.CheckboxSelectMultiple)

    class Meta:
        model = Subscription
        fields = ["owner", *SUBSCRIPTION_FIELDS]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        data = {key: cleaned[key] for key in SUBSCRIPTION_FIELDS if key in cleaned}
        owner = cleaned.get("owner") if "owner" in self.fields else self.instance.owner or self.owner_default
        try:
            subscription_input_check(data, owner_id=owner.pk if owner else None)
        except SkaldError as exc:
            field = exc.extra.get("field")
            self.add_error(field if field in self.fields else None, f"{exc.message} ({exc.code})")
        return cleaned


@admin.register(Subscription)
class SubscriptionAdmin(_Staff, admin.ModelAdmin):
    form = SubscriptionForm
    list_display = ["name", "owner", "channel", "enabled", "receiver", "chain_order", "escalate_after_minutes"]
    list_filter = ["channel", "enabled", "failing"]
    readonly_fields = ["secret", "failing", "last_error", "created_at", "updated_at", "delivery_log"]
    actions = ["rotate_secret"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Subscription]:
        return super().get_queryset(request).select_related("owner").filter(**_own(request))

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form: Any = super().get_form(request, obj, change=change, **kwargs)
        form.owner_default = None if request.user.is_superuser else request.user  # whose address user_email means
        return form

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = [f for f in SUBSCRIPTION_FIELDS] + (["owner"] if request.user.is_superuser else [])
        return fields + (self.readonly_fields if obj is not None else [])

    @admin.display(description="Receiver")
    def receiver(self, obj: Subscription) -> str:
        if obj.failing:
            return format_html('<span style="color:#b00">failing: {}</span>', obj.last_error[:120])
        return "ok"

    def save_model(self, request: HttpRequest, obj: Subscription, form: Any, change: bool) -> None:
        data = {key: form.cleaned_data[key] for key in SUBSCRIPTION_FIELDS if key in form.cleaned_data}
        actor = Actor.user(request.user)
        owner: Any = form.cleaned_data.get("owner") if request.user.is_superuser else request.user
        try:
            if change:
                saved = subscription_update(actor=actor, subscription=Subscription.objects.get(pk=obj.pk), data=data)
            else:
                saved = subscription_create(actor=actor, owner=owner, data=data)
        except SkaldError as exc:
            messages.error(request, f"{exc.code}: {exc.message}")
            return
        obj.pk = saved.pk

    @admin.display(description=f"Delivery log (latest {LOG_ROWS})")
    def delivery_log(self, obj: Subscription) -> str:
        if obj.pk is None:
            return "-"
        rows = obj.deliveries.order_by("-id").values_list(
            "created_at", "kind", "status", "attempts", "last_status_code", "latency_ms", "last_error")[:LOG_ROWS]
        body = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                    "<td>{}</td></tr>",
                                ((f"{at:%Y-%m-%d %H:%M:%S}", kind, status, attempts, code or "-",
                                  f"{ms} ms" if ms is not None else "-", error[:200])
                                 for at, kind, status, attempts, code, ms, error in rows))
        return format_html("<table><tr><th>created</th><th>event</th><th>status</th><th>attempts</th>"
                           "<th>response</th><th>latency</th><th>last error</th></tr>{}</table>", body) \
            if rows else "No deliveries yet."

    def delete_model(self, request: HttpRequest, obj: Subscription) -> None:
        subscription_delete(actor=Actor.user(request.user), subscription=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        for subscription in queryset:
            subscription_delete(actor=Actor.user(request.user), subscription=subscription)

    @admin.action(description="Rotate the signing secret (the old one signs too for a grace period)")
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        for subscription in queryset:
            subscription_rotate_secret(actor=Actor.user(request.user), subscription=subscription)
        messages.info(request, f"Rotated {len(queryset)} secret(s).")


@admin.register(Delivery)
class DeliveryAdmin(_Staff, admin.ModelAdmin):
    list_display = ["created_at", "kind", "subject", "subscription", "status", "attempts", "last_status_code",
                    "latency_ms", "last_error"]
    list_filter = ["status", "kind"]
    readonly_fields = ["event_id", "kind", "subject", "subscription", "webhook_id", "status", "attempts",
                       "next_attempt_at", "last_status_code", "last_error", "latency_ms", "delivered_after_ms",
                       "event_at", "created_at", "sent_at", "payload_shown"]
    exclude = ["payload"]
    actions = ["retry_deliveries"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only; the retry action is the one write

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        own = {"subscription__owner_id": request.user.pk} if not request.user.is_superuser else {}
        return super().get_queryset(request).select_related("subscription").filter(**own)

    @admin.display(description="Payload")
    def payload_shown(self, obj: Delivery) -> str:
        return format_html_join("", "<div><b>{}</b>: {}</div>", ((k, str(v)[:300]) for k, v in obj.payload.items()))

    @admin.action(description="Send again now (same webhook-id)", permissions=["view"])
    def retry_deliveries(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        retried = 0
        for delivery in queryset:
            try:
                delivery_retry(actor=Actor.user(request.user), delivery_id=delivery.pk)
                retried += 1
            except SkaldError as exc:
                messages.warning(request, f"{delivery.webhook_id}: {exc.message}")
        messages.info(request, f"Sent {retried} message(s) again.")
