"""Prometheus metrics (SPEC O1), computed from the durable store at scrape time.

The loop runs on workers in other processes (and machines); reading the rows every process writes
keeps one truthful view without a multiprocess registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from django.db.models import Count, Sum
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, ExchangeStatus
from skald import backpressure, dbpool


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

        # Infrastructure failures that broke an exchange (tool_infrastructure_error,
        # store_infrastructure_error) and every other break, by the stable code the store kept.
        broken = CounterMetricFamily("skald_exchanges_broken", "Exchanges broken, by error code", labels=["code"])
        by_code = (Exchange.objects.filter(status=ExchangeStatus.BROKEN)
                   .values_list("error_code").annotate(n=Count("id")))
        for code, count in by_code:
            broken.add_metric([code or "unknown"], count)
        yield broken

        denies = CounterMetricFamily("skald_hook_denies", "Policy hook denials")
        denies.add_metric([], AuditEvent.objects.filter(kind=AuditKind.HOOK_DENIED).count())
        yield denies

        yield from _this_process()

        for extra in _extra_collectors:
            yield from extra()


def _this_process() -> Iterator[Metric]:
    """The scraped web process's own backpressure: its admission gate and its connection pool."""
    refused = CounterMetricFamily("skald_http_refused_busy", "Requests answered 503 server_busy by this process")
    refused.add_metric([], backpressure.refused_total())
    yield refused
    stats = dbpool.pool_stats()
    if stats:
        pool = GaugeMetricFamily("skald_db_pool", "This process's PostgreSQL pool (psycopg_pool stats)",
                                 labels=["stat"])
        for name in ("pool_min", "pool_max", "pool_size", "pool_available", "requests_waiting",
                     "requests_num", "requests_timeouts", "connections_num", "connections_errors"):
            pool.add_metric([name], stats.get(name, 0))
        yield pool


MetricSource = Callable[[], Iterable[Metric]]
_extra_collectors: list[MetricSource] = []


def register_collector(fn: MetricSource) -> None:
    """Apps add metric families (approvals, compaction probes) without this module importing them."""
    _extra_collectors.append(fn)


def render() -> bytes:
    registry = CollectorRegistry()
    registry.register(StoreCollector())
    return generate_latest(registry)
