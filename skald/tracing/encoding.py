"""Skald's spans as OTLP protobuf (``ExportTraceServiceRequest``), written directly.

The OTLP/HTTP exporter's own encoder builds a protobuf object per span, per attribute and per value
from the SDK's span objects; for the few span shapes Skald records this writes the same wire bytes
straight from :class:`skald.tracing.otel.Record` values (field numbers from
``opentelemetry/proto/trace/v1/trace.proto`` and ``common/v1/common.proto``). A receiver decodes
them with ``opentelemetry-proto`` like any other export (``tests/skald/tracing/test_encoding.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["Batch", "Record"]


class Record(Protocol):
    """What is encoded of a span (:class:`skald.tracing.otel.Record` is one): a protocol, so this
    module imports nothing of the recorder that imports it."""

    name: str
    kind: int
    trace_id: int
    span_id: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    links: Sequence[tuple[int, int]]
    status: int
    status_message: str

    @property
    def parent_id(self) -> int: ...

    @property
    def parent_remote(self) -> bool: ...

KEPT_VALUES = 4096  # encoded attributes (and names) kept; all forgotten when full
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    """An ``AnyValue``: string 1, bool 2, int 3, double 4, array 5."""
    if isinstance(value, str):
        return _field(b"\x0a", value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)  # int64: two's complement, as protobuf does
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, Sequence):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(item)) for item in value))
    return _any_value(str(value))


class Batch:
    """Encodes records for one resource and one instrumentation scope; keeps the bytes of the parts
    that repeat (the resource, the scope, each attribute key) across batches."""

    def __init__(self, *, resource: Mapping[str, Any], resource_schema: str, scope: str, scope_version: str,
                 scope_schema: str) -> None:
        self._keys: dict[str, bytes] = {}
        self._kept: dict[tuple[str, type, Any], bytes] = {}
        self._names: dict[tuple[str, int], bytes] = {}  # a span's name and kind fields
        resource_bytes = b"".join(_field(b"\x0a", self._attribute(k, v)) for k, v in resource.items())
        self._resource = _field(b"\x0a", resource_bytes)  # ResourceSpans.resource = 1
        self._resource_schema = _field(b"\x1a", resource_schema.encode()) if resource_schema else b""
        scope_bytes = _field(b"\x0a", scope.encode()) + (_field(b"\x12", scope_version.encode()) if scope_version
                                                         else b"")
        self._scope = _field(b"\x0a", scope_bytes)  # ScopeSpans.scope = 1
        self._scope_schema = _field(b"\x1a", scope_schema.encode()) if scope_schema else b""

    def _attribute(self, key: str, value: Any) -> bytes:
        """A ``KeyValue``: key 1, value 2 (the key's bytes kept: Skald's keys are few)."""
        head = self._keys.get(key)
        if head is None:
            head = self._keys[key] = _field(b"\x0a", key.encode())
        return head + _field(b"\x12", _any_value(value))

    def _span_attribute(self, key: str, value: Any) -> bytes:
        """A span's attribute (``Span.attributes`` = 9), its bytes kept for the next span: most values
        recur (an operation, a provider, a model, a tool, a verdict, the session's and exchange's ids)."""
        kind = value.__class__
        if kind is list or (kind is str and len(value) > 64):  # a list is not hashable; long text rarely recurs
            return _field(b"\x4a", self._attribute(key, value))
        kept_key = (key, kind, value)  # the class too: True == 1, and both hash alike
        try:
            found = self._kept.get(kept_key)
        except TypeError:  # a tuple holding something unhashable
            return _field(b"\x4a", self._attribute(key, value))
        if found is None:
            if len(self._kept) >= KEPT_VALUES:
                self._kept.clear()
            found = self._kept[kept_key] = _field(b"\x4a", self._attribute(key, value))
        return found

    def span(self, record: Record) -> bytes:
        """A ``Span``: trace_id 1, span_id 2, parent_span_id 4, name 5, kind 6, start 7, end 8,
        attributes 9, links 13, status 15."""
        parts = [b"\x0a\x10", record.trace_id.to_bytes(16, "big"), b"\x12\x08", record.span_id.to_bytes(8, "big")]
        if record.parent_id:
            parts += (b"\x22\x08", record.parent_id.to_bytes(8, "big"))
        named = self._names.get((record.name, record.kind))
        if named is None:
            if len(self._names) >= KEPT_VALUES:
                self._names.clear()
            named = self._names[(record.name, record.kind)] = (
                _field(b"\x2a", record.name.encode("utf-8", "surrogatepass")) + b"\x30" + _varint(record.kind))
        parts += (named, b"\x39", _FIXED64.pack(record.start_ns), b"\x41", _FIXED64.pack(record.end_ns))
        attribute = self._span_attribute
        parts += [attribute(k, v) for k, v in record.attributes.items()]
        for trace_id, span_id in record.links:
            parts.append(_field(b"\x6a", b"\x0a\x10" + trace_id.to_bytes(16, "big") + b"\x12\x08"
                                + span_id.to_bytes(8, "big")))
        if record.status:
            message = _field(b"\x12", record.status_message.encode()) if record.status_message else b""
            parts.append(_field(b"\x7a", message + b"\x18" + _varint(record.status)))
        return b"".join(parts)

    def request(self, records: Iterable[Record]) -> bytes:
        """The ``ExportTraceServiceRequest`` of ``records``: one ResourceSpans, one ScopeSpans."""
        spans = b"".join(_field(b"\x12", self.span(record)) for record in records)
        scope_spans = _field(b"\x12", self._scope + spans + self._scope_schema)
        return _field(b"\x0a", self._resource + scope_spans + self._resource_schema)
