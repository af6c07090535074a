"""Prometheus metrics (SPEC O1), computed from the durable store at scrape time.

The loop runs on workers in other processes (and machines); reading the rows every process writes
keeps one truthful view without a multiprocess registry.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

from django.db.models import Count, Sum
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.events import EventKind
from loop.hooks import HookPoint
from loop.models import Exchange, ExchangeStatus, SessionEvent
from skald import backpressure, dbpool
from skald.jobs.models import JobRun
from skald.jobs.selectors import tree_spends
from skald.tracing import metrics as genai_metrics


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

        yield from _hook_families()
        yield from _compaction_families()
        yield from _job_families()
        yield from genai_metrics.collect()  # gen_ai.client.token.usage, gen_ai.client.operation.duration

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


def _hook_families() -> Iterator[Metric]:
    """Hook denies and contained hook errors by hook point, from their coarse audit rows."""
    denies: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for kind, payload in AuditEvent.objects.filter(kind__in=[AuditKind.HOOK_DENIED, AuditKind.HOOK_ERROR]) \
            .values_list("kind", "payload"):
        body = json.loads(payload)
        if kind == AuditKind.HOOK_DENIED:
            denies[body.get("point", "")] += 1
        else:
            errors[body.get("point", "")] += int(body.get("errors", 1))
    deny_family = CounterMetricFamily("skald_hook_denies", "Policy hook denials by hook point", labels=["point"])
    error_family = CounterMetricFamily("skald_hook_errors", "Hooks that raised (contained, counted) by hook point",
                                       labels=["point"])
    for point in HookPoint:
        deny_family.add_metric([point.value], denies[point.value])
        error_family.add_metric([point.value], errors[point.value])
    yield deny_family
    yield error_family


PERMILLE_BUCKETS = (0, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000)
TREE_TOKEN_BUCKETS = (1_000, 10_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 5_000_000)


def _compaction_families() -> Iterator[Metric]:
    """Compactions by probe result, the probe loss histogram, latches and quota stops (SPEC L14)."""
    reports = list(SessionEvent.objects.filter(kind=EventKind.COMPACTION_PROBE)
                   .values_list("payload__result", "payload__lost_permille", "payload__latched"))
    results = Counter(result for result, _lost, _latched in reports)
    by_result = CounterMetricFamily("skald_compactions", "Compactions by probe result", labels=["result"])
    for result in ("ok", "no_signal", "degraded"):
        by_result.add_metric([result], results[result])
    yield by_result
    losses = sorted(int(lost) for _result, lost, _latched in reports)
    buckets = [(str(bound), sum(1 for lost in losses if lost <= bound)) for bound in PERMILLE_BUCKETS]
    yield HistogramMetricFamily("skald_compaction_lost_permille", "Probe loss per compaction, per mille",
                                buckets=[*buckets, ("+Inf", len(losses))], sum_value=sum(losses))
    latches = CounterMetricFamily("skald_compaction_latches", "Episodes latched conservative by a degraded probe")
    latches.add_metric([], sum(1 for *_rest, latched in reports if latched))
    yield latches
    stops = CounterMetricFamily("skald_compaction_quota_stops",
                                "Stops at the compaction quota (each exchange that met it)")
    stops.add_metric([], SessionEvent.objects.filter(kind=EventKind.COMPACTION_QUOTA).count())
    yield stops


def _job_families() -> Iterator[Metric]:
    """Job-run endings parked as dead letters after failed deliveries (issue 27 §4), and what async
    tasks and cron runs spent beside the conversations that started them (§2: the trees' spend)."""
    dead = GaugeMetricFamily("skald_job_dead_letters", "Job runs whose delivery is parked for an operator")
    dead.add_metric([], JobRun.objects.filter(dead_lettered_at__isnull=False, delivered_at__isnull=True).count())
    yield dead
    spent = CounterMetricFamily("skald_job_tokens", "Provider tokens spent by job runs, by job kind",
                                labels=["kind"])
    rows = (Exchange.objects.filter(session__in=JobRun.objects.values("session_id")).values("session__job__kind")
            .annotate(i=Sum("input_tokens"), o=Sum("output_tokens")))
    by_kind = {str(r["session__job__kind"] or "cron"): int(r["i"] or 0) + int(r["o"] or 0) for r in rows}
    for kind in ("task", "cron"):
        spent.add_metric([kind], by_kind.get(kind, 0))
    yield spent
    trees = tree_spends()  # a histogram, not a label per tree: trees are unbounded
    buckets = [(str(bound), sum(1 for tokens in trees if tokens <= bound)) for bound in TREE_TOKEN_BUCKETS]
    yield HistogramMetricFamily("skald_tree_tokens", "Provider tokens per tree (a root conversation with its "
                                "async tasks at any depth)", buckets=[*buckets, ("+Inf", len(trees))],
                                sum_value=sum(trees))
    returned = CounterMetricFamily("skald_job_tokens_returned", "Tokens async tasks reserved from their root "
                                   "and gave back unspent when they ended")
    returned.add_metric([], int(JobRun.objects.aggregate(t=Sum("returned_tokens"))["t"] or 0))
    yield returned


MetricSource = Callable[[], Iterable[Metric]]
_extra_collectors: list[MetricSource] = []


def register_collector(fn: MetricSource) -> None:
    """Apps add metric families (approvals, compaction probes) without this module importing them."""
    _extra_collectors.append(fn)


def render() -> bytes:
    registry = CollectorRegistry()
    registry.register(StoreCollector())
    return generate_latest(registry)
