"""The OpenTelemetry side of ``loop.tracing``: imported only when tracing is on.

Spans are recorded by :class:`OtelTracer` as :class:`Record` values — plain slots, no per-span
context objects, no attribute validation (the kernel's call sites set only strings, numbers,
booleans and string lists) — because the SDK's own span objects cost more than the five spans of a
turn may (``docs/observability.md``, Cost). Everything around them is the SDK's: the resource
(``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the sampler (``OTEL_TRACES_SAMPLER[_ARG]``;
the default, parent-based always-on, is decided inline), the :class:`BatchSpanProcessor`
(``OTEL_BSP_*``) and the OTLP/HTTP exporter (``OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT``, ``…_HEADERS``,
``…_TIMEOUT``, ``…_COMPRESSION``), which sends the batch as protobuf written by
:mod:`skald.tracing.encoding`. A test's exporter (the SDK's in-memory one) gets the SDK's
``ReadableSpan`` objects (:mod:`skald.tracing.export`). Span context crosses threads through
:meth:`OtelTracer.carry` and processes as W3C ``traceparent`` strings.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from contextvars import Token
from datetime import datetime
from typing import Any, TypeVar

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanProcessor
from opentelemetry.trace import SpanKind

from loop import tracing
from skald.tracing.capture import screen
from skald.tracing.context import CURRENT, Current, parse_traceparent
from skald.tracing.encoding import Batch
from skald.tracing.exits import flush_at_exit
from skald.tracing.export import OtlpRecordExporter, ReadableExporter, RecordBatchProcessor
from skald.tracing.logs import install_log_context

__all__ = ["OtelTracer", "Record", "flush", "install", "processor", "shutdown"]

T = TypeVar("T")
SCHEMA_URL = f"https://opentelemetry.io/schemas/{tracing.SEMCONV}"
SCOPE = "skald"
_state: dict[str, SpanProcessor] = {}
logger = logging.getLogger(__name__)
_SAMPLED = trace.SpanContext(1, 1, is_remote=False, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
_ERROR = 2  # OTLP StatusCode.STATUS_CODE_ERROR
# random's own generator, as the SDK's id generator uses: reseeded in place in every forked child (a worker)
_bits = random.getrandbits
_now = time.time_ns
# OTLP SpanKind numbers (the SDK's SpanKind value + 1)
_INTERNAL, _SERVER, _CLIENT = SpanKind.INTERNAL.value + 1, SpanKind.SERVER.value + 1, SpanKind.CLIENT.value + 1


def _kind_of(name: str) -> int:
    if name.startswith("chat ") or name == "skald.compaction":
        return _CLIENT  # a call to a model
    if name == "skald.admission":
        return _SERVER
    return _INTERNAL


_kinds: dict[str, int] = {}  # per span name (agents, models and tools: a few dozen names)


def _kind(name: str) -> int:
    kind = _kinds.get(name)
    if kind is None:
        kind = _kind_of(name)
        if len(_kinds) < 4096:
            _kinds[name] = kind
    return kind


class Record:
    """One sampled span: what the kernel set on it, until :meth:`end` hands it to the processor."""

    __slots__ = ("attributes", "capture", "end_ns", "kind", "links", "name", "parent", "sink", "span_id",
                 "start_ns", "status", "status_message", "trace_id")
    context = _SAMPLED  # all the SDK's span processors read of a span: only sampled ones are recorded
    flags = 1
    remote = False  # as a parent (a Record is what ``CURRENT`` holds while it is current)

    def __init__(self, name: str, trace_id: int, span_id: int, parent: Current | None, kind: int,
                 attributes: dict[str, Any], links: Sequence[tuple[int, int]], start_ns: int, capture: bool,
                 sink: Callable[[Record], object]) -> None:
        self.name = name
        self.trace_id = trace_id
        self.span_id = span_id
        self.kind = kind
        self.parent = parent
        self.attributes = attributes
        self.links = links
        self.start_ns = start_ns
        self.end_ns = 0
        self.status = 0
        self.status_message = ""
        self.capture = capture
        self.sink = sink

    @property
    def parent_id(self) -> int:
        return self.parent.span_id if self.parent is not None else 0

    @property
    def parent_remote(self) -> bool:
        return self.parent is not None and self.parent.remote

    @property
    def capturing(self) -> bool:
        return self.capture

    def set(self, attributes: tracing.Attributes) -> None:
        if not self.end_ns:
            self.attributes.update(attributes)

    def content(self, key: str, text: str) -> None:
        if self.capture and text and not self.end_ns:
            self.attributes[key] = screen(text, what=key)

    def fail(self, error: str) -> None:
        if not self.end_ns:
            self.attributes["error.type"] = error
            self.status, self.status_message = _ERROR, error

    def end(self) -> None:
        if not self.end_ns:
            self.end_ns = _now()
            self.sink(self)

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-01"


class Unsampled:
    """A span the sampler dropped: it propagates its context (flags 00) and records nothing."""

    __slots__ = ("span_id", "trace_id")
    capturing = False
    flags = 0
    remote = False

    def __init__(self, trace_id: int, span_id: int) -> None:
        self.trace_id, self.span_id = trace_id, span_id

    def set(self, attributes: tracing.Attributes) -> None:
        pass

    def content(self, key: str, text: str) -> None:
        pass

    def fail(self, error: str) -> None:
        pass

    def end(self) -> None:
        pass

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-00"


def _restorer(token: Token[Current | None]) -> Callable[[], object]:
    def restore() -> None:
        try:
            CURRENT.reset(token)
        except ValueError:  # restored in another context than it was set in: go back by value
            CURRENT.set(token.old_value if token.old_value is not Token.MISSING else None)

    return restore


def _nothing() -> None:
    return None


class OtelTracer:
    """``loop.tracing.Tracer`` recording :class:`Record` spans into ``processor``."""

    def __init__(self, processor: SpanProcessor, *, capture: bool, sampler: sampling.Sampler | None = None) -> None:
        self.processor, self.capture = processor, capture
        self.sampler = sampler  # None: parent-based always-on, decided inline
        # the env's parent-based samplers (``parentbased_*``) decide a child as its parent was sampled
        self.parent_based = isinstance(sampler, sampling.ParentBased)
        # where an ended record goes: straight into the batch (past on_end's check of the sampled
        # flag, which every Record has), or the processor's on_end
        self.sink: Callable[[Record], object] = processor.emit if isinstance(processor, RecordBatchProcessor) \
            else processor.on_end  # type: ignore[assignment]  # a Record stands for a ReadableSpan there

    def start(self, name: str, attributes: tracing.Attributes, *, parent: str | None = None,
              links: Sequence[str] = (), start_time: datetime | None = None) -> tracing.Span:
        up: Current | None = CURRENT.get() if parent is None else parse_traceparent(parent) if parent else None
        trace_id = up.trace_id if up is not None else _bits(128) or 1
        span_id = _bits(64) or 1
        kind = _kinds.get(name) or _kind(name)
        recorded = attributes if attributes.__class__ is dict else dict(attributes)  # kept: the call site's own
        if self.sampler is None or (up is not None and self.parent_based):
            sampled = up is None or bool(up.flags & 1)  # a parent-based sampler follows the parent's flag
        else:
            sampled = self._sampled(up, trace_id, name, kind, recorded)
        if not sampled:
            return Unsampled(trace_id, span_id)
        linked = [(p.trace_id, p.span_id) for p in map(parse_traceparent, links) if p is not None] if links else ()
        start_ns = int(start_time.timestamp() * 1_000_000_000) if start_time is not None else _now()
        return Record(name, trace_id, span_id, up, kind, recorded, linked, start_ns, self.capture, self.sink)

    def _sampled(self, up: Current | None, trace_id: int, name: str, kind: int, attributes: dict[str, Any]) -> bool:
        """The configured (not default) sampler's decision; what it adds to the attributes is kept."""
        assert self.sampler is not None
        context = None
        if up is not None:
            remote = trace.SpanContext(up.trace_id, up.span_id, is_remote=up.remote,
                                       trace_flags=trace.TraceFlags(up.flags))
            context = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        result = self.sampler.should_sample(context, trace_id, name, SpanKind(kind - 1), attributes)
        if result.attributes:
            attributes.update(result.attributes)
        return result.decision.is_sampled()

    def current(self, span: tracing.Span) -> Callable[[], object]:
        if span.__class__ is not Record and span.__class__ is not Unsampled:
            return _nothing  # the no-op span (started while tracing was off)
        return _restorer(CURRENT.set(span))  # type: ignore[arg-type]  # checked just above

    def resume(self, traceparent: str) -> Callable[[], object]:
        if not traceparent:
            return _nothing  # admitted with tracing off: the drive starts a trace of its own
        return _restorer(CURRENT.set(parse_traceparent(traceparent)))

    def traceparent(self) -> str:
        current = CURRENT.get()
        return current.traceparent() if current is not None else ""

    def carry(self, fn: Callable[..., T]) -> Callable[..., T]:
        current = CURRENT.get()

        def run(*args: Any, **kwargs: Any) -> T:
            token = CURRENT.set(current)
            try:
                return fn(*args, **kwargs)
            finally:
                CURRENT.reset(token)

        return run


def _sampler() -> sampling.Sampler | None:
    """The ``OTEL_TRACES_SAMPLER`` sampler, or None for the default (parent-based always-on)."""
    name = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    if name in ("", "parentbased_always_on"):
        return None
    return sampling._get_from_env_or_default()  # the SDK's reading of both variables, warnings included


def install(*, exporter: SpanExporter | None = None, capture: bool = False) -> SpanProcessor:
    """Route the kernel's spans to the OTLP exporter through the batch processor (or, given an
    ``exporter``, to it synchronously, as ``ReadableSpan`` objects); once per process (a second call
    replaces the first, as tests do)."""
    shutdown()
    resource = Resource.create({"service.name": "skald"} if not _service_named() else {})
    processor: SpanProcessor
    if exporter is None:
        encoding = Batch(resource=dict(resource.attributes), resource_schema=resource.schema_url, scope=SCOPE,
                         scope_version="", scope_schema=SCHEMA_URL)
        processor = RecordBatchProcessor(OtlpRecordExporter(encoding))  # type: ignore[arg-type]  # reads Records
    else:
        processor = SimpleSpanProcessor(ReadableExporter(exporter, resource=resource, scope=SCOPE,
                                                         schema_url=SCHEMA_URL))
    _state["processor"] = processor
    tracing.install(OtelTracer(processor, capture=capture, sampler=_sampler()))
    install_log_context()
    flush_at_exit(flush)  # spans still in the batch are sent when the process (or a forked worker) ends
    return processor


def _service_named() -> bool:
    return bool(os.environ.get("OTEL_SERVICE_NAME")) or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")


def processor() -> SpanProcessor | None:
    return _state.get("processor")


def flush(timeout_ms: int = 30000) -> None:
    """Send the spans that ended and were not sent yet (the process is about to end)."""
    current = _state.get("processor")
    if current is not None:
        current.force_flush(timeout_ms)


def shutdown() -> None:
    """Flush and stop the exporter; the kernel goes back to its no-op tracer."""
    current = _state.pop("processor", None)
    tracing.uninstall()
    if current is not None:
        current.force_flush()
        current.shutdown()
