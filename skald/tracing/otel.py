"""The OpenTelemetry side of ``loop.tracing``: imported only when tracing is on.

One tracer provider per process, its resource and sampler from the standard ``OTEL_*`` variables
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER[_ARG]``), its spans sent
by the SDK's :class:`BatchSpanProcessor` to the OTLP/HTTP (protobuf) exporter, which reads
``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``…_HEADERS``, ``…_TIMEOUT``. Span context crosses
threads through :meth:`OtelTracer.carry` and processes as W3C ``traceparent`` strings.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from loop import tracing
from skald.tracing.capture import screen
from skald.tracing.exits import flush_at_exit
from skald.tracing.logs import install_log_context

__all__ = ["OtelSpan", "OtelTracer", "flush", "install", "provider", "shutdown"]

T = TypeVar("T")
_propagator = TraceContextTextMapPropagator()
_state: dict[str, TracerProvider] = {}
logger = logging.getLogger(__name__)


def _kind(name: str) -> SpanKind:
    if name.startswith("chat ") or name == "skald.compaction":
        return SpanKind.CLIENT  # a call to a model
    if name == "skald.admission":
        return SpanKind.SERVER
    return SpanKind.INTERNAL


def context_of(traceparent: str) -> otel_context.Context:
    """The context a stored traceparent names (an empty one when it is empty or malformed). The
    common shape (version 00, as Skald writes it) is read without the propagator's regex."""
    parts = traceparent.split("-")
    if len(parts) == 4 and parts[0] == "00" and len(parts[1]) == 32 and len(parts[2]) == 16 and len(parts[3]) == 2:
        try:
            trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
        except ValueError:
            return otel_context.Context()
        if trace_id and span_id:
            remote = trace.SpanContext(trace_id, span_id, is_remote=True, trace_flags=trace.TraceFlags(flags))
            return trace.set_span_in_context(trace.NonRecordingSpan(remote), otel_context.Context())
        return otel_context.Context()
    return _propagator.extract({"traceparent": traceparent}) if traceparent else otel_context.Context()


def span_context_of(traceparent: str) -> trace.SpanContext | None:
    context = trace.get_current_span(context_of(traceparent)).get_span_context()
    return context if context.is_valid else None


def traceparent_of(span: trace.Span) -> str:
    context = span.get_span_context()
    if not context.is_valid:
        return ""
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


class OtelSpan:
    __slots__ = ("capture", "span")

    def __init__(self, span: trace.Span, capture: bool) -> None:
        self.span, self.capture = span, capture

    @property
    def capturing(self) -> bool:
        return self.capture

    def set(self, attributes: tracing.Attributes) -> None:
        self.span.set_attributes(attributes)  # type: ignore[arg-type]  # a Mapping of the same values

    def content(self, key: str, text: str) -> None:
        if self.capture and text:
            self.span.set_attribute(key, screen(text, what=key))

    def fail(self, error: str) -> None:
        self.span.set_attribute("error.type", error)
        self.span.set_status(Status(StatusCode.ERROR, error))

    def end(self) -> None:
        self.span.end()

    def traceparent(self) -> str:
        return traceparent_of(self.span)


def _restorer(token: object) -> Callable[[], object]:
    def restore() -> None:
        otel_context.detach(token)  # type: ignore[arg-type]  # the token attach returned

    return restore


class OtelTracer:
    """``loop.tracing.Tracer`` over an OpenTelemetry tracer."""

    def __init__(self, tracer: trace.Tracer, *, capture: bool) -> None:
        self._tracer, self.capture = tracer, capture

    def start(self, name: str, attributes: tracing.Attributes, *, parent: str | None = None,
              links: Sequence[str] = (), start_time: datetime | None = None) -> tracing.Span:
        context = context_of(parent) if parent is not None else None
        linked = [Link(c) for c in (span_context_of(t) for t in links if t) if c is not None] if links else None
        start_ns = int(start_time.timestamp() * 1_000_000_000) if start_time is not None else None
        span = self._tracer.start_span(name, context=context, kind=_kind(name), attributes=attributes,  # type: ignore[arg-type]
                                       links=linked, start_time=start_ns)
        return OtelSpan(span, self.capture)

    def current(self, span: tracing.Span) -> Callable[[], object]:
        if not isinstance(span, OtelSpan):
            return _nothing
        return _restorer(otel_context.attach(trace.set_span_in_context(span.span)))

    def resume(self, traceparent: str) -> Callable[[], object]:
        if not traceparent:
            return _nothing  # admitted with tracing off: the drive starts a trace of its own
        return _restorer(otel_context.attach(context_of(traceparent)))

    def traceparent(self) -> str:
        return traceparent_of(trace.get_current_span())

    def carry(self, fn: Callable[..., T]) -> Callable[..., T]:
        context = otel_context.get_current()

        def run(*args: Any, **kwargs: Any) -> T:
            token = otel_context.attach(context)
            try:
                return fn(*args, **kwargs)
            finally:
                otel_context.detach(token)

        return run


def _nothing() -> None:
    return None


def install(*, exporter: SpanExporter | None = None, capture: bool = False) -> TracerProvider:
    """The process's tracer provider, routed into the kernel's seam (once; a second call replaces
    the exporter, as tests do)."""
    shutdown()
    resource = Resource.create({"service.name": "skald"} if not _service_named() else {})
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER[_ARG]
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _state["provider"] = provider
    tracing.install(OtelTracer(provider.get_tracer("skald", schema_url=SCHEMA_URL), capture=capture))
    install_log_context()
    flush_at_exit(flush)  # spans still in the batch are sent when the process (or a forked worker) ends
    return provider


SCHEMA_URL = f"https://opentelemetry.io/schemas/{tracing.SEMCONV}"


def _service_named() -> bool:
    return bool(os.environ.get("OTEL_SERVICE_NAME")) or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")


def provider() -> TracerProvider | None:
    return _state.get("provider")


def flush(timeout_ms: int = 30000) -> None:
    """Send the spans that ended and were not sent yet (the process is about to end)."""
    current = _state.get("provider")
    if current is not None:
        current.force_flush(timeout_ms)


def shutdown() -> None:
    """Flush and stop the exporter; the kernel goes back to its no-op tracer."""
    current = _state.pop("provider", None)
    tracing.uninstall()
    if current is not None:
        current.force_flush()
        current.shutdown()
