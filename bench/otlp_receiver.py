"""A real OTLP/HTTP trace receiver on loopback: ``POST /v1/traces`` bodies decoded with
``opentelemetry-proto`` (``ExportTraceServiceRequest``), kept as plain :class:`ReceivedSpan` values.

Used by the end-to-end trace test and by ``make bench``'s tracing figure (the exporter's cost
includes a real socket, a real protobuf encode and a real HTTP round trip).
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: Mapping[str, Any]
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    start_ns: int
    end_ns: int
    service: str
    status_code: int = 0


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def decode(body: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    found: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(ReceivedSpan(
                    name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                    parent_span_id=span.parent_span_id.hex(),
                    attributes={kv.key: _value(kv.value) for kv in span.attributes},
                    links=tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links),
                    start_ns=span.start_time_unix_nano, end_ns=span.end_time_unix_nano,
                    service=str(resource.get("service.name", "")), status_code=span.status.code,
                ))
    return found


@dataclass
class OtlpReceiver:
    """``with OtlpReceiver() as receiver:`` → ``receiver.endpoint`` for ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

    host: str = "127.0.0.1"
    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0
    raw: list[bytes] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.requests += 1
                    receiver.raw.append(body)
                    receiver.spans.extend(spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def bodies(self) -> list[bytes]:
        with self._lock:
            return list(self.raw)


def main() -> None:
    """``python -m bench.otlp_receiver``: print the endpoint, serve until stdin closes, then print
    how many spans arrived (a receiver in a process of its own, so its CPU is not the sender's)."""
    import sys

    with OtlpReceiver() as receiver:
        print(receiver.endpoint, flush=True)
        sys.stdin.read()
        print(len(receiver.received()), flush=True)


if __name__ == "__main__":
    main()
