"""A cron run's trace links to the request that created or last changed its job (issue 33), as a
task's links to its spawning call: recorded by the SDK's in-memory exporter, real store and runs."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loop import tracing
from loop.providers.loopback import text_turn
from skald.jobs.cron import cron_job_create, cron_job_update
from skald.jobs.models import ScheduledJob
from skald.tasks import run_cron_job

pytestmark = [pytest.mark.django_db(transaction=True)]

REQUEST = "POST /admin/skald/scheduledjob/add/"


def finished(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def linked_to(span: ReadableSpan) -> set[tuple[int, int]]:
    return {(link.context.trace_id, link.context.span_id) for link in span.links}


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return span.context.trace_id, span.context.span_id


def test_a_cron_run_links_to_the_request_that_scheduled_it_then_to_the_one_that_changed_it(
        alice, agents, script, inline_tasks, conversation, spans):
    request = tracing.tracer.start(REQUEST, {})  # the span of the request that creates the job
    with tracing.active(request):
        job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly log check",
                              expression="0 3 * * *", home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    (created,) = finished(spans, "skald.job.schedule")
    (parent,) = finished(spans, REQUEST)
    assert created.parent is not None and created.parent.span_id == ids(parent)[1]
    assert dict(created.attributes or {}) == {"skald.job.action": "create", "skald.job.kind": "cron",
                                              "gen_ai.agent.name": "log-analyst", "skald.job.cron": "0 3 * * *",
                                              "skald.job.id": job.pk}

    script(text_turn("quiet night"), text_turn("second night"))
    assert run_cron_job(job.pk) == "succeeded"
    (first,) = finished(spans, "skald.admission")
    assert linked_to(first) == {ids(created)}
    assert first.context is not None and first.context.trace_id != created.context.trace_id  # a trace of its own
    assert first.parent is None
    assert {s.context.trace_id for s in spans.get_finished_spans() if s.name.startswith("invoke_agent")} == {
        first.context.trace_id}  # the run's agent is in the run's trace

    cron_job_update(job_id=job.pk, expression="0 4 * * *", task="nightly log check", principal=f"user:{alice.pk}")
    changed = next(s for s in finished(spans, "skald.job.schedule") if s.attributes["skald.job.action"] == "update")
    assert changed.parent is None and changed.attributes["skald.job.id"] == job.pk  # no request span: a root
    spans.clear()
    assert run_cron_job(job.pk) == "succeeded"
    (second,) = finished(spans, "skald.admission")
    assert linked_to(second) == {ids(changed)}


def test_with_tracing_off_a_cron_job_keeps_no_traceparent(alice, agents, conversation):
    job = cron_job_create(owner_id=alice.pk, agent="log-analyst", task="nightly log check", expression="0 3 * * *",
                          home_session_id=conversation.pk, principal=f"user:{alice.pk}")
    cron_job_update(job_id=job.pk, expression="0 4 * * *", task="check", principal=f"user:{alice.pk}")
    assert ScheduledJob.objects.get(pk=job.pk).scope_extras == {}
