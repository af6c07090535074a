"""Skald's spans leave as standard OTLP: the protobuf ``skald.tracing.encoding`` writes decodes with
``opentelemetry-proto`` to every field that was recorded (issue 33), and the sampler named by
``OTEL_TRACES_SAMPLER`` decides what is recorded, the default deciding by the parent's flag."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bench.otlp_receiver import decode
from loop import tracing
from skald.tracing import configure, otel
from skald.tracing.encoding import Batch
from skald.tracing.otel import Record

BATCH = dict(resource={"service.name": "skald-test", "deployment.environment": "ci"},
             resource_schema="https://opentelemetry.io/schemas/1.37.0", scope="skald", scope_version="",
             scope_schema="https://opentelemetry.io/schemas/1.37.0")
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def recorded() -> list[Record]:
    kept: list[Record] = []
    tracer = otel.OtelTracer(otel.SimpleSpanProcessor(InMemorySpanExporter()), capture=False)
    tracer.sink = kept.append
    chat = tracer.start("chat gpt-4o-mini", {"gen_ai.operation.name": "chat", "skald.turn": 2, "skald.depth": -3,
                                             "skald.compaction.probe_score": 0.75, "skald.admission.replayed": True,
                                             "gen_ai.response.finish_reasons": ["stop", "länge"]}, parent=PARENT,
                        links=("00-11111111111111111111111111111111-2222222222222222-01", "not a traceparent"))
    chat.fail("ProviderError")
    chat.end()
    tracer.start("skald.admission", {"skald.source": "web"}, parent="").end()
    return kept


def test_the_encoded_request_decodes_to_what_was_recorded():
    chat, admission = recorded()
    body = Batch(**BATCH).request([chat, admission])
    ExportTraceServiceRequest.FromString(body)  # well-formed for the reference decoder
    first, second = decode(body)

    assert (first.name, first.trace_id, first.parent_span_id) == (
        "chat gpt-4o-mini", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")
    assert first.span_id == f"{chat.span_id:016x}" and (first.start_ns, first.end_ns) == (chat.start_ns, chat.end_ns)
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "chat", "skald.turn": 2, "skald.depth": -3, "skald.compaction.probe_score": 0.75,
        "skald.admission.replayed": True, "gen_ai.response.finish_reasons": ("stop", "länge"),
        "error.type": "ProviderError"}
    assert first.links == (("11111111111111111111111111111111", "2222222222222222"),)  # the malformed one is dropped
    assert first.status_code == 2 and first.service == "skald-test"
    assert second.parent_span_id == "" and second.trace_id != first.trace_id and second.status_code == 0

    request = ExportTraceServiceRequest.FromString(body)
    (resource_spans,) = request.resource_spans
    (scope_spans,) = resource_spans.scope_spans
    assert scope_spans.scope.name == "skald" and scope_spans.schema_url.endswith("/1.37.0")
    assert [s.kind for s in scope_spans.spans] == [3, 2]  # CLIENT, SERVER
    assert scope_spans.spans[0].status.message == "ProviderError"


def test_kept_encodings_give_the_same_bytes():
    batch = Batch(**BATCH)
    chat, admission = recorded()
    assert batch.request([chat, admission]) == batch.request([chat, admission]) == Batch(**BATCH).request(
        [chat, admission])
    admission.attributes = {"skald.x": True}
    chat.attributes = {"skald.x": 1}  # equal to True, and hashed alike: still encoded as what it is
    assert [s.attributes["skald.x"] for s in decode(batch.request([admission, chat]))] == [True, 1]
    assert [type(s.attributes["skald.x"]) for s in decode(batch.request([chat, admission]))] == [int, bool]


@pytest.fixture
def sampled(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InMemorySpanExporter, pytest.MonkeyPatch]]:
    exporter = InMemorySpanExporter()
    yield exporter, monkeypatch
    otel.shutdown()


def test_the_default_sampler_follows_the_parents_flag(sampled):
    exporter, _ = sampled
    configure(exporter=exporter, capture=False)
    unsampled = tracing.tracer.start("invoke_agent a", {}, parent=PARENT[:-2] + "00")
    with tracing.active(unsampled):
        assert tracing.tracer.traceparent().endswith("-00")  # the decision travels on to the next process
        tracing.tracer.start("chat m", {}).end()
    tracing.tracer.start("invoke_agent b", {}, parent=PARENT).end()
    assert [s.name for s in exporter.get_finished_spans()] == ["invoke_agent b"]


def test_a_configured_sampler_decides(sampled):
    exporter, monkeypatch = sampled
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    configure(exporter=exporter, capture=False)
    tracing.tracer.start("skald.admission", {}, parent=PARENT).end()
    assert exporter.get_finished_spans() == ()
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "1.0")
    ratio = InMemorySpanExporter()  # a second install shuts the first exporter down
    configure(exporter=ratio, capture=False)
    tracing.tracer.start("skald.admission", {}, parent=PARENT[:-2] + "00").end()  # a ratio ignores the parent
    assert [s.name for s in ratio.get_finished_spans()] == ["skald.admission"]


def test_a_parent_based_ratio_samples_roots_by_ratio_and_children_as_their_parent(sampled):
    exporter, monkeypatch = sampled
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    configure(exporter=exporter, capture=False)
    tracing.tracer.start("skald.admission", {}, parent="").end()  # a root: the ratio (0) drops it
    tracing.tracer.start("invoke_agent a", {}, parent=PARENT).end()  # a sampled parent: kept
    tracing.tracer.start("invoke_agent b", {}, parent=PARENT[:-2] + "00").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["invoke_agent a"]
