"""The ASGI admission gate: a bounded number of HTTP requests run at once; the rest wait a bounded
time, then answer ``503 server_busy`` with ``Retry-After`` (never a 500, never a dropped connection).

Each running request holds at most one pooled database connection (Django keeps it per thread for
the request), so with ``SKALD_HTTP_MAX_INFLIGHT`` at or below the pool size the web process never
asks the pool for more than it has: excess traffic waits here, as a coroutine, instead of as a
thread blocked on the pool. The probes and static files pass without a slot.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

Scope = Any
Receive = Any
Send = Any
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

EXEMPT_PREFIXES = ("/healthz", "/readyz", "/metrics", "/static/")


class AdmissionGate:
    """Wrap an ASGI HTTP app with an in-flight limit and a bounded wait for a slot."""

    def __init__(self, app: ASGIApp, *, limit: int, wait_seconds: float, retry_after: int) -> None:
        self.app = app
        self.limit = limit
        self.wait_seconds = wait_seconds
        self.retry_after = retry_after
        self.refused = 0  # requests answered 503 here, for /metrics
        self._slots: asyncio.Semaphore | None = None  # bound to the server's loop on first use

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.limit <= 0 or scope["type"] != "http" or scope["path"].startswith(EXEMPT_PREFIXES):
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=self.wait_seconds)
        except TimeoutError:
            self.refused += 1
            await self._busy(send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()

    async def _busy(self, send: Send) -> None:
        body = json.dumps({
            "code": "server_busy",
            "message": f"All {self.limit} request slots stayed busy for {self.wait_seconds:g} s.",
            "extra": {"retry_after": self.retry_after},
        }).encode()
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", str(self.retry_after).encode()),
            (b"content-length", str(len(body)).encode()),
        ]})
        await send({"type": "http.response.body", "body": body})


_gate: AdmissionGate | None = None


def admission_gate(app: ASGIApp) -> AdmissionGate:
    """The process's gate around ``app``, sized from settings."""
    from django.conf import settings

    global _gate
    _gate = AdmissionGate(app, limit=settings.SKALD_HTTP_MAX_INFLIGHT,
                          wait_seconds=settings.SKALD_HTTP_WAIT_SECONDS,
                          retry_after=settings.SKALD_RETRY_AFTER_SECONDS)
    return _gate


def refused_total() -> int:
    """Requests this process's gate answered 503 (0 when no gate runs here)."""
    return _gate.refused if _gate is not None else 0
