"""MCP metrics for ``/metrics`` (registered by ``skald.wiring``).

Durable, read at scrape time like the rest (any worker made the calls): calls and errors per
server from the tool-call rows, tools per server and status, quarantines from the audit log. The
latency of a call is this process's (a histogram the tool proxy fills): the rows keep no duration.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator

from django.db.models import Count, Q
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import ToolCall
from skald.mcp.definitions import PREFIX, split_offered
from skald.mcp.models import McpTool

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_lock = threading.Lock()
_latency: dict[str, list[float]] = {}  # server -> [count per bucket…, +Inf count, sum]


def observe(server: str, seconds: float) -> None:
    """One call's round trip through this process's pool."""
    with _lock:
        row = _latency.setdefault(server, [0.0] * (len(BUCKETS) + 2))
        for index, bound in enumerate(BUCKETS):
            if seconds <= bound:
                row[index] += 1
        row[len(BUCKETS)] += 1
        row[-1] += seconds


def collect() -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
    calls = CounterMetricFamily("skald_mcp_calls", "MCP tool calls by server and status", labels=["server", "status"])
    errors = CounterMetricFamily("skald_mcp_call_errors", "MCP tool calls that ended in an error, by server",
                                 labels=["server"])
    by_server: dict[tuple[str, str], int] = defaultdict(int)
    failed: dict[str, int] = defaultdict(int)
    rows = (ToolCall.objects.filter(tool__startswith=PREFIX).values("tool", "status")
            .annotate(n=Count("id"), bad=Count("id", filter=Q(is_error=True))))
    for row in rows:
        parts = split_offered(row["tool"])
        if parts is None:
            continue
        by_server[(parts[0], row["status"])] += row["n"]
        failed[parts[0]] += row["bad"]
    for (server, status), count in sorted(by_server.items()):
        calls.add_metric([server, status], count)
    for server, count in sorted(failed.items()):
        errors.add_metric([server], count)
    yield calls
    yield errors

    tools = GaugeMetricFamily("skald_mcp_tools", "MCP tools by server and status", labels=["server", "status"])
    for server, status, count in (McpTool.objects.values_list("server__name", "status")
                                  .annotate(n=Count("id")).order_by()):
        tools.add_metric([server, status], count)
    yield tools
    quarantines = CounterMetricFamily("skald_mcp_quarantines", "MCP tool definitions quarantined (a listing that "
                                      "differed from the pin)")
    quarantines.add_metric([], AuditEvent.objects.filter(kind=AuditKind.MCP_TOOL_QUARANTINED,
                                                         subject_type="mcp_tool").count())
    yield quarantines

    latency = HistogramMetricFamily("skald_mcp_call_seconds", "MCP call round trips through this process's pool",
                                    labels=["server"])
    with _lock:
        snapshot = {server: list(row) for server, row in _latency.items()}
    for server, counts in sorted(snapshot.items()):
        buckets = [(str(bound), counts[index]) for index, bound in enumerate(BUCKETS)]
        latency.add_metric([server], [*buckets, ("+Inf", counts[len(BUCKETS)])], counts[-1])
    yield latency
