"""A request that arrives with a W3C ``traceparent`` header runs under it while tracing is on, so
the admission span of a message (and everything the exchange does later, in any process) joins the
caller's trace. Off, the middleware costs one attribute read per request."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from loop import tracing


class TraceContextMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        traceparent = request.headers.get("traceparent", "") if tracing.enabled else ""
        if not traceparent:
            return self.get_response(request)
        restore = tracing.tracer.resume(traceparent[:64])
        try:
            return self.get_response(request)
        finally:
            restore()
