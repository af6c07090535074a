"""Notification metrics for ``/metrics`` (registered by ``skald.wiring``), read from the outbox at
scrape time like the rest: any worker sent them."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from skald.notifications.models import Delivery, DeliveryStatus

BUCKETS_MS: tuple[int, ...] = (100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 900000, 3600000)


def collect() -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
    rows = {row["channel"]: row for row in Delivery.objects.values(channel=F("subscription__channel")).annotate(
        sent=Count("id", filter=Q(status=DeliveryStatus.SENT)),
        dead=Count("id", filter=Q(status=DeliveryStatus.DEAD)),
        open=Count("id", filter=Q(status__in=(DeliveryStatus.PENDING, DeliveryStatus.FAILING))),
        tries=Sum("attempts"))}
    sent = CounterMetricFamily("skald_notifications_sent", "Notifications delivered, by channel", labels=["channel"])
    failed = CounterMetricFamily("skald_notifications_failed_attempts", "Delivery attempts that failed, by channel",
                                 labels=["channel"])
    dead = CounterMetricFamily("skald_notifications_dead_lettered", "Notifications whose retry budget is spent",
                               labels=["channel"])
    waiting = GaugeMetricFamily("skald_notifications_waiting", "Notifications not delivered yet (pending or "
                                                               "failing)", labels=["channel"])
    for channel, row in sorted(rows.items()):
        sent.add_metric([channel], row["sent"])
        failed.add_metric([channel], max((row["tries"] or 0) - row["sent"], 0))
        dead.add_metric([channel], row["dead"])
        waiting.add_metric([channel], row["open"])
    yield sent
    yield failed
    yield dead
    yield waiting

    delivered = Delivery.objects.filter(status=DeliveryStatus.SENT, delivered_after_ms__isnull=False)
    counts = delivered.aggregate(total=Sum("delivered_after_ms"), n=Count("id"),
                                 **{f"le{b}": Count("id", filter=Q(delivered_after_ms__lte=b)) for b in BUCKETS_MS})
    buckets = [(str(b / 1000), counts[f"le{b}"]) for b in BUCKETS_MS] + [("+Inf", counts["n"])]
    yield HistogramMetricFamily("skald_notification_delivery_seconds", "From the event to its delivery",
                                buckets=buckets, sum_value=(counts["total"] or 0) / 1000)
