"""Where :class:`skald.tracing.otel.Record` spans go: the OTLP/HTTP exporter, or any SDK exporter.

:class:`OtlpRecordExporter` is the SDK's OTLP/HTTP exporter — its endpoint, headers, timeout,
compression, TLS and retries, all from the ``OTEL_EXPORTER_OTLP_*`` variables — with its encoding
step replaced: a batch of records becomes the request's protobuf bytes in one pass
(:mod:`skald.tracing.encoding`), in the batch processor's thread. :class:`ReadableExporter` hands
them to any other exporter as the SDK's ``ReadableSpan`` objects (the in-memory one of the tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from skald.tracing.encoding import Batch, Record

__all__ = ["OtlpRecordExporter", "ReadableExporter", "RecordBatchProcessor", "readable"]

logger = logging.getLogger(__name__)


class OtlpRecordExporter(OTLPSpanExporter):
    """OTLP over HTTP/protobuf, configured by the standard variables, encoding records directly."""

    def __init__(self, encoding: Batch) -> None:
        super().__init__()
        self._encoding = encoding

    def export(self, spans: Sequence[Record]) -> SpanExportResult:  # type: ignore[override]
        if self._shutdown:
            return SpanExportResult.FAILURE
        try:
            body = self._encoding.request(spans)
        except Exception:  # a span that cannot be encoded must not take the batch thread down
            logger.exception("encoding %d spans failed", len(spans))
            return SpanExportResult.FAILURE
        # the SDK exporter's own client: retries with backoff, compression, headers, TLS
        return SpanExportResult.SUCCESS if self._client.export(body).success else SpanExportResult.FAILURE


def readable(record: Record, *, resource: Resource, scope: InstrumentationScope) -> ReadableSpan:
    """The SDK's form of a record."""
    parent = SpanContext(record.trace_id, record.parent_id, is_remote=record.parent_remote,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED)) if record.parent_id else None
    links = [Link(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)))
             for trace_id, span_id in record.links]
    status = Status(StatusCode.ERROR, record.status_message) if record.status else Status(StatusCode.UNSET)
    return ReadableSpan(
        name=record.name, context=SpanContext(record.trace_id, record.span_id, is_remote=False,
                                              trace_flags=TraceFlags(TraceFlags.SAMPLED)),
        parent=parent, resource=resource, attributes=dict(record.attributes), links=links,
        kind=SpanKind(record.kind - 1), status=status, start_time=record.start_ns, end_time=record.end_ns,
        instrumentation_scope=scope)


class ReadableExporter(SpanExporter):
    """``exporter`` fed ``ReadableSpan`` objects made from records."""

    def __init__(self, exporter: SpanExporter, *, resource: Resource, scope: str, schema_url: str) -> None:
        self.exporter, self.resource = exporter, resource
        self.scope = InstrumentationScope(scope, schema_url=schema_url)

    def export(self, spans: Sequence[Record]) -> SpanExportResult:  # type: ignore[override]
        return self.exporter.export([readable(r, resource=self.resource, scope=self.scope) for r in spans])

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class RecordBatchProcessor(BatchSpanProcessor):
    """The SDK's batch span processor (``OTEL_BSP_*``, its thread, its fork handling, flush and
    shutdown), with :meth:`emit`: a record straight into the batch. ``on_end`` would first ask the
    span's context whether it is sampled, and every record is."""

    def __init__(self, exporter: SpanExporter) -> None:
        super().__init__(exporter)
        self.emit: Callable[[Record], None] = self._batch_processor.emit  # type: ignore[assignment]  # reads Records
