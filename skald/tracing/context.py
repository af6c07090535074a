"""The current span of a thread (or task) while tracing is on: a context variable holding what a
child needs of its parent (:class:`Current`: the live span itself, or a :class:`Parent` read from a
stored ``traceparent``), set by ``OtelTracer.current``/``resume``/``carry``.
Also what log records read their ``trace_id`` and ``span_id`` from (``skald.tracing.logs``)."""

from __future__ import annotations

import re
from contextvars import ContextVar
from typing import NamedTuple, Protocol

__all__ = ["CURRENT", "Current", "Parent", "parse_traceparent"]


class Parent(NamedTuple):
    trace_id: int
    span_id: int
    flags: int  # W3C trace flags: bit 0 is "sampled"
    remote: bool  # read from a traceparent (another process, or a stored one), not a live span

    def traceparent(self) -> str:
        return f"00-{self.trace_id:032x}-{self.span_id:016x}-{self.flags:02x}"


_TRACEPARENT = re.compile(r"\s*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?\s*")
class Current(Protocol):
    """What ``CURRENT`` holds: a :class:`Parent` read from a traceparent, or a live span itself."""

    @property
    def trace_id(self) -> int: ...

    @property
    def span_id(self) -> int: ...

    @property
    def flags(self) -> int: ...

    @property
    def remote(self) -> bool: ...

    def traceparent(self) -> str: ...


CURRENT: ContextVar[Current | None] = ContextVar("skald_trace_parent", default=None)


def parse_traceparent(traceparent: str) -> Parent | None:
    """A W3C ``traceparent`` (version 00, or a later version's first four fields, as the spec
    allows), or None when it is empty or malformed (the span it parents becomes a trace's root)."""
    found = _TRACEPARENT.fullmatch(traceparent)
    if found is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return Parent(trace_id, span_id, int(flags_hex, 16), True)
