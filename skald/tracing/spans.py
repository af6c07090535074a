"""Spans the product starts itself (the kernel's are in ``loop``): a human's decision on a parked call,
and the change of a cron job's schedule that its later runs link to.

Each is a no-op while tracing is off (``loop.tracing.enabled``).
"""

from __future__ import annotations

from datetime import datetime

from loop import tracing


def decision_span(*, exchange_traceparent: str, call_traceparent: str, tool: str, call_key: str, decision: str,
                  decided_by: str, parked_at: datetime, decided_at: datetime, rule: int | None = None) -> None:
    """``skald.decision {tool}``: in the exchange's trace, linked to the parked call's span (which
    ended at the park), with who decided, what, and how long the call waited."""
    if not tracing.enabled:
        return
    waited = max(0.0, (decided_at - parked_at).total_seconds())
    attributes: dict[str, str | int | float] = {
        "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_key, "skald.decision": decision,
        "skald.decision.by": decided_by, "skald.decision.wait_seconds": waited}
    if rule is not None:
        attributes["skald.gate.rule"] = rule
    tracing.tracer.start(f"skald.decision {tool}", attributes, parent=exchange_traceparent or None,
                         links=(call_traceparent,) if call_traceparent else ()).end()


def schedule_span(action: str, *, agent: str, cron: str) -> tracing.Span:
    """``skald.job.schedule``: a cron job created or changed (``action``), a child of the request's
    or the calling tool's span when there is one, else a trace's root. Started here, ended by the
    caller (``with tracing.active(span):`` around the write); the job keeps its ``traceparent`` and
    every run's admission links to it. The no-op span while tracing is off."""
    if not tracing.enabled:
        return tracing.NOOP.start("", {})
    return tracing.tracer.start("skald.job.schedule", {"skald.job.action": action, "skald.job.kind": "cron",
                                                      "gen_ai.agent.name": agent, "skald.job.cron": cron})
