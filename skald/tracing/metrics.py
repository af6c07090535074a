"""The GenAI client metrics for ``/metrics`` (semconv ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.duration``), as Prometheus histograms read from the durable store.

Every provider call of every worker leaves its assistant row (``loop.events.AssistantPayload``:
``input_tokens``, ``output_tokens`` and ``duration_ms``, the dispatch seam's measure), so one
aggregate query per scrape gives every process's calls without a multiprocess registry, and the
kernel's hot path pays nothing for them. Always on, whether tracing is or not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import BigIntegerField, Count, Q, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from prometheus_client.core import HistogramMetricFamily, Metric

from loop.events import EventKind
from loop.models import SessionEvent

# The semantic conventions' advised bucket boundaries.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
_SERIES = {"input": ("input_tokens", 1, TOKEN_BUCKETS), "output": ("output_tokens", 1, TOKEN_BUCKETS),
           "duration": ("duration_ms", 1000, DURATION_BUCKETS)}


def _aggregates() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for series, (key, scale, bounds) in _SERIES.items():
        field = f"payload__{key}"
        for index, bound in enumerate(bounds):
            found[f"{series}_{index}"] = Count("id", filter=Q(**{f"{field}__gte": 0, f"{field}__lte": bound * scale}))
        found[f"{series}_count"] = Count("id", filter=Q(**{f"{field}__gte": 0}))
        found[f"{series}_sum"] = Sum(Cast(KeyTextTransform(key, "payload"), BigIntegerField()))
    return found


def collect() -> Iterator[Metric]:
    labels = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_token_type"]
    usage = HistogramMetricFamily("gen_ai_client_token_usage", "Tokens per provider call (GenAI semconv "
                                  "gen_ai.client.token.usage)", labels=labels)
    duration = HistogramMetricFamily("gen_ai_client_operation_duration", "Seconds per provider call, send to "
                                     "message end (GenAI semconv gen_ai.client.operation.duration)",
                                     labels=labels[:2])
    rows: Any = (SessionEvent.objects.filter(kind=EventKind.ASSISTANT)
            .values("exchange__config__provider").annotate(**_aggregates()))
    for row in rows:
        provider = str(row["exchange__config__provider"] or "unknown")
        for token_type in ("input", "output"):
            usage.add_metric(["chat", provider, token_type], _buckets(row, token_type, TOKEN_BUCKETS),
                             sum_value=row[f"{token_type}_sum"] or 0)
        duration.add_metric(["chat", provider], _buckets(row, "duration", DURATION_BUCKETS),
                            sum_value=(row["duration_sum"] or 0) / 1000)
    yield usage
    yield duration


def _buckets(row: dict[str, Any], series: str, bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    return [*((str(bound), row[f"{series}_{i}"]) for i, bound in enumerate(bounds)), ("+Inf", row[f"{series}_count"])]
