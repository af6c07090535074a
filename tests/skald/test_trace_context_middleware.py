"""A message posted with a W3C ``traceparent`` is admitted inside the caller's trace (issue 33)."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loop import tracing
from loop.models import Exchange
from skald.agents.seed import seed_agents
from skald.tracing import configure, otel
from skald.tracing.logs import TraceContextFilter

pytestmark = [pytest.mark.django_db]

CALLER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_the_admission_span_is_a_child_of_the_callers_span(alice, api):
    seed_agents()
    client = api(alice)
    session = client.post("/api/sessions/", {"agent": "troubleshooter"}, format="json").json()
    exporter = InMemorySpanExporter()
    configure(exporter=exporter)
    try:
        posted = client.post(f"/api/sessions/{session['id']}/messages/", {"content": "hello"}, format="json",
                             HTTP_TRACEPARENT=CALLER)
    finally:
        otel.shutdown()
    assert posted.status_code == 202, posted.content
    (admission,) = [s for s in exporter.get_finished_spans() if s.name == "skald.admission"]
    assert f"{admission.context.trace_id:032x}" == "0af7651916cd43dd8448eb211c80319c"
    assert admission.parent is not None and f"{admission.parent.span_id:016x}" == "b7ad6b7169203331"
    assert Exchange.objects.get(pk=posted.json()["id"]).traceparent.startswith("00-0af7651916cd43dd8448eb211c80319c-")


def test_log_records_carry_the_current_span():
    configure(exporter=InMemorySpanExporter())
    try:
        record = logging.LogRecord("skald", logging.INFO, __file__, 1, "hi", None, None)
        span = tracing.tracer.start("work", {})
        with tracing.active(span):
            TraceContextFilter().filter(record)
        expected = span.traceparent().split("-")
        assert (record.trace_id, record.span_id) == (expected[1], expected[2])
        outside = logging.LogRecord("skald", logging.INFO, __file__, 1, "hi", None, None)
        TraceContextFilter().filter(outside)
        assert (outside.trace_id, outside.span_id) == ("", "")
    finally:
        otel.shutdown()
