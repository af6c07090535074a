"""Approval metrics (SPEC O1), read from the durable rows at scrape time.

- ``skald_gate_decisions_total{action}``: GATE_DECISION audit rows by their payload's action. The
  payload is canonical JSON (sorted keys, no spaces), so ``"action":"allow"`` is an exact
  substring of exactly those rows; a quote inside a string value would be escaped and cannot
  forge it.
- ``skald_approval_wait_seconds``: a histogram of ``resolved_at - created_at`` over approvals a
  human answered (approved or rejected); expiries are not waits for an answer.
- ``skald_approvals_pending``: calls parked right now.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from approvals.models import ApprovalStatus, PendingApproval, RuleAction
from audit.kinds import AuditKind
from audit.models import AuditEvent

# Upper bounds in seconds: humans answer in seconds to hours; the default approval TTL is 24 h.
WAIT_BUCKETS: tuple[float, ...] = (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600)


def collect() -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
    yield gate_decisions()
    yield approval_waits()
    pending = GaugeMetricFamily("skald_approvals_pending", "Tool calls parked awaiting a human")
    pending.add_metric([], PendingApproval.objects.filter(status=ApprovalStatus.PENDING).count())
    yield pending


def gate_decisions() -> CounterMetricFamily:
    """One query: a filtered count per action."""
    counts = AuditEvent.objects.filter(kind=AuditKind.GATE_DECISION).aggregate(**{
        action: Count("id", filter=Q(payload__contains=f'"action":"{action}"')) for action in RuleAction.values
    })
    family = CounterMetricFamily("skald_gate_decisions", "Approval gate decisions by action", labels=["action"])
    for action in RuleAction.values:
        family.add_metric([action], counts[action] or 0)
    return family


def approval_waits() -> HistogramMetricFamily:
    """One query: the count, the sum and one filtered count per bucket, computed by the database."""
    wait = ExpressionWrapper(F("resolved_at") - F("created_at"), output_field=DurationField())
    answered = PendingApproval.objects.filter(
        status__in=[ApprovalStatus.APPROVED, ApprovalStatus.REJECTED], resolved_at__isnull=False
    ).annotate(wait=wait)
    buckets = {f"le_{i}": Count("id", filter=Q(wait__lte=timedelta(seconds=bound)))
               for i, bound in enumerate(WAIT_BUCKETS)}
    totals = answered.aggregate(n=Count("id"), total=Sum("wait"), **buckets)
    total: timedelta | None = totals["total"]
    family = HistogramMetricFamily("skald_approval_wait_seconds",
                                   "Time from parking a call to a human's answer, in seconds")
    family.add_metric(
        [],
        buckets=[(_le(bound), totals[f"le_{i}"] or 0) for i, bound in enumerate(WAIT_BUCKETS)]
        + [("+Inf", totals["n"] or 0)],
        sum_value=total.total_seconds() if total is not None else 0.0,
    )
    return family


def _le(bound: float) -> str:
    return f"{float(bound)}"
