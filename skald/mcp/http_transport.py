"""The HTTP side of an MCP connection: the SDK's Streamable HTTP client over Skald's own httpx client.

Skald's client (one per pooled connection, kept for its life) adds to the SDK's:

- **pinning**: every request to the server's host connects to the address the SSRF screen passed
  (``ServerSpec.address``), while ``Host`` and TLS (SNI, the certificate check) keep the real name,
  as the providers' client does: a DNS answer that changes after the screen is never used;
- **kept-alive connections**: the SDK closes a request's SSE answer as soon as it holds the
  JSON-RPC response, before the server ends the stream, so the connection under it is dropped and
  the next call opens a new one (``modelcontextprotocol/python-sdk`` issue 2707). Closing such an
  answer here first reads what is left of it, briefly (the server ends it right after the
  response), so the connection goes back to the pool. The caller already has its result: only the
  connection's task waits;
- **trace context**: a ``tools/call`` whose ``_meta`` carries a ``traceparent`` sends it as the W3C
  header too, when tracing is on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
from mcp.client.streamable_http import streamable_http_client

from loop import tracing
from skald.mcp.calls import ServerSpec

DRAIN_SECONDS = 0.5  # at most this long to read the rest of an SSE answer before dropping its connection


class _Drained(httpx2.AsyncByteStream):
    """An SSE answer that, closed before its end, reads the rest first (bounded) so the
    connection under it can be reused."""

    def __init__(self, inner: httpx2.AsyncByteStream) -> None:
        self._inner = inner
        self._ended = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            yield chunk
        self._ended = True

    async def aclose(self) -> None:
        try:
            if not self._ended:
                with anyio.move_on_after(DRAIN_SECONDS):
                    async for _ in self._inner:
                        pass
        except httpx2.TransportError:
            pass  # a broken stream: its connection is dropped, as it would have been
        finally:
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()


class _Transport(httpx2.AsyncBaseTransport):
    def __init__(self, url: str, address: str) -> None:
        self._host = httpx2.URL(url).host
        self._address = address or self._host
        self._inner = httpx2.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.host == self._host and self._host != self._address:
            request.url = request.url.copy_with(host=self._address)
            if request.url.scheme == "https":
                request.extensions = {**request.extensions, "sni_hostname": self._host}
        response = await self._inner.handle_async_request(request)
        if request.method == "POST" and response.headers.get("content-type", "").startswith("text/event-stream"):
            assert isinstance(response.stream, httpx2.AsyncByteStream)
            response.stream = _Drained(response.stream)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


async def _traceparent_header(request: httpx2.Request) -> None:
    """The pooled session's requests are sent by its own task, outside the calling thread's
    context: the message's ``_meta`` is where the call's trace context travels."""
    body = request.content
    if b'"traceparent"' not in body:
        return
    try:
        meta = json.loads(body).get("params", {}).get("_meta", {})
    except (ValueError, AttributeError):
        return
    if isinstance(meta, dict) and isinstance(meta.get("traceparent"), str):
        request.headers["traceparent"] = meta["traceparent"]


@asynccontextmanager
async def http_streams(spec: ServerSpec) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's read and write streams to ``spec.url``, over a client of Skald's own."""
    client = httpx2.AsyncClient(headers=dict(spec.headers), trust_env=False, follow_redirects=False,
                                timeout=httpx2.Timeout(30.0, read=300.0), transport=_Transport(spec.url, spec.address),
                                event_hooks={"request": [_traceparent_header]} if tracing.enabled else None)
    async with client, streamable_http_client(spec.url, http_client=client) as (read, write):
        yield read, write
