"""Prometheus metrics (SPEC O1), computed from the durable store at scrape time.

The loop runs on workers in other processes (and machines); reading the rows every process writes
keeps one truthful view without a multiprocess registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from django.db.models import Count, Sum
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange


class StoreCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        outcomes = CounterMetricFamily("skald_exchange_outcomes", "Settled exchanges by outcome", labels=["outcome"])
        for row in Exchange.objects.exclude(outcome="").values("outcome").annotate(n=Count("id")):
            outcomes.add_metric([row["outcome"]], row["n"])
        yield outcomes

        totals = Exchange.objects.aggregate(
            turns=Sum("turns"), input=Sum("input_tokens"), output=Sum("output_tokens")
        )
        turns = CounterMetricFamily("skald_provider_turns", "Provider turns dispatched")
        turns.add_metric([], totals["turns"] or 0)
        yield turns
        tokens = CounterMetricFamily("skald_provider_tokens", "Provider tokens by class", labels=["class"])
        tokens.add_metric(["input"], totals["input"] or 0)
        tokens.add_metric(["output"], totals["output"] or 0)
        yield tokens

        denies = CounterMetricFamily("skald_hook_denies", "Policy hook denials")
        denies.add_metric([], AuditEvent.objects.filter(kind=AuditKind.HOOK_DENIED).count())
        yield denies

        for extra in _extra_collectors:
            yield from extra()


MetricSource = Callable[[], Iterable[Metric]]
_extra_collectors: list[MetricSource] = []


def register_collector(fn: MetricSource) -> None:
    """Apps add metric families (approvals, compaction probes) without this module importing them."""
    _extra_collectors.append(fn)


def render() -> bytes:
    registry = CollectorRegistry()
    registry.register(StoreCollector())
    return generate_latest(registry)
