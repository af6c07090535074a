"""The tracing seam: the kernel says where a span starts and ends, the product records it.

The kernel imports no tracing library. It calls :data:`tracer` (a :class:`Tracer`); with tracing
off that is :data:`NOOP`, whose spans are one shared object whose methods do nothing, and the call
sites that would build attribute dictionaries check :data:`enabled` first, so a turn pays a few
attribute look-ups and nothing else. ``skald.tracing`` installs an OpenTelemetry implementation
with :func:`install` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or a traces endpoint) is configured.

Attribute names follow the OpenTelemetry GenAI semantic conventions, version :data:`SEMCONV`
(``gen_ai.*``); Skald's own facts are under ``skald.*``. Span context crosses processes as a W3C
``traceparent`` string: the exchange row keeps its admission's (``Exchange.traceparent``), so every
driver of the exchange (the worker, a resolver, recovery after a crash) continues the same trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Protocol, TypeVar

__all__ = [
    "NOOP",
    "SEMCONV",
    "Span",
    "Tracer",
    "active",
    "carry",
    "enabled",
    "install",
    "tracer",
    "uninstall",
]

SEMCONV = "1.37.0"  # the GenAI semantic conventions these names follow

Attributes = Mapping[str, str | int | float | bool | Sequence[str]]
T = TypeVar("T")


class Span(Protocol):
    """One started span. ``content`` records prompt/completion/argument/result text, only when the
    product's content capture is on (``capturing``: a caller checks it before building a costly
    text), screened and masked by the product first."""

    @property
    def capturing(self) -> bool: ...

    def set(self, attributes: Attributes) -> None: ...

    def content(self, key: str, text: str) -> None: ...

    def fail(self, error: str) -> None: ...

    def end(self) -> None: ...

    def traceparent(self) -> str: ...


class Tracer(Protocol):
    def start(self, name: str, attributes: Attributes, *, parent: str | None = None, links: Sequence[str] = (),
              start_time: datetime | None = None) -> Span:
        """A new span: a child of ``parent`` (a traceparent; None: this thread's current span),
        linked to ``links`` (traceparents), starting at ``start_time`` (None: now). The span may
        keep ``attributes`` as its own: pass a mapping built for the call, and change it no more."""
        ...

    def current(self, span: Span) -> Callable[[], object]:
        """Make ``span`` this thread's current span; returns the function that restores the last."""
        ...

    def resume(self, traceparent: str) -> Callable[[], object]:
        """Make a stored traceparent this thread's current context (a driver continuing an exchange)."""
        ...

    def traceparent(self) -> str:
        """This thread's current span as a traceparent ("" when there is none)."""
        ...

    def carry(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` running under this thread's current context, whatever thread calls it."""
        ...


class _NoSpan:
    __slots__ = ()
    capturing = False

    def set(self, attributes: Attributes) -> None:
        pass

    def content(self, key: str, text: str) -> None:
        pass

    def fail(self, error: str) -> None:
        pass

    def end(self) -> None:
        pass

    def traceparent(self) -> str:
        return ""


def _nothing() -> None:
    return None


class _NoTracer:
    __slots__ = ()
    span = _NoSpan()

    def start(self, name: str, attributes: Attributes, *, parent: str | None = None, links: Sequence[str] = (),
              start_time: datetime | None = None) -> Span:
        return self.span

    def current(self, span: Span) -> Callable[[], object]:
        return _nothing

    def resume(self, traceparent: str) -> Callable[[], object]:
        return _nothing

    def traceparent(self) -> str:
        return ""

    def carry(self, fn: Callable[..., T]) -> Callable[..., T]:
        return fn


NOOP: Tracer = _NoTracer()
tracer: Tracer = NOOP
enabled = False


def install(implementation: Tracer) -> None:
    """Route the kernel's spans to ``implementation`` (the product's, once per process)."""
    global tracer, enabled
    tracer, enabled = implementation, True


def uninstall() -> None:
    global tracer, enabled
    tracer, enabled = NOOP, False


def carry(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` under the caller's trace context in whatever thread runs it (a no-op when off)."""
    return tracer.carry(fn) if enabled else fn


class active:  # lower case: it reads as ``with tracing.active(span):``
    """``span`` current for the block, ended after it (recording an escaping exception)."""

    __slots__ = ("restore", "span")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.restore: Callable[[], object] = _nothing

    def __enter__(self) -> Span:
        self.restore = tracer.current(self.span)
        return self.span

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if kind is not None:
            self.span.fail(kind.__name__)
        self.restore()
        self.span.end()
