"""The cost of an MCP call (issue 29) beside a built-in tool's, and whose it is.

The demo's server (``demo/mcp_server.py``, the SDK's server API) is reached over stdio (a child
process started by the pool) and over Streamable HTTP on loopback (the same server under uvicorn in
a process of its own, :mod:`bench.mcp_http_server`), once answering with SSE streams (the SDK
server's default) and once with JSON bodies. For each, in process and without a database:

- **through Skald**: ``skald.mcp.client.McpPool.call`` from this thread, as the kernel's tool
  threads call it (the hop into the pool's event loop, the pooled session, the result's
  conversion); its median minus the built-in tool's (``run``, a function call) is the overhead the
  issue's target bounds (at most 2 ms);
- **the SDK alone**: the same call through a bare ``mcp.ClientSession`` on an event loop this thread
  drives (the SDK's own ``stdio_client`` / ``streamable_http_client``, no pool, no thread hop). The
  two are measured in adjacent pairs in random order: the median paired difference is Skald's
  share, the rest is the SDK's client and the server's;
- **a bare POST** (HTTP only): the same ``tools/call`` as one HTTP request (httpx, no MCP client):
  the server's and loopback HTTP's floor, below which no client can go;
- **CPU per call**: this process's (pool vs SDK alone, each in a batch of its own) and the server
  process's, read from /proc: unlike wall time, little moved by other load on the machine.

The server's INFO logging (a line per request in the SDK's server) is switched off in its process,
and the client-side libraries' in this one while measuring.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from bench.procstat import cpu_seconds
from loop.cancellation import CancelToken
from loop.tools.registry import FunctionTool
from skald.mcp.client import McpPool, ServerSpec

DEMO = Path(__file__).resolve().parent.parent / "demo" / "mcp_server.py"
HTTP_SERVER = Path(__file__).resolve().with_name("mcp_http_server.py")
CALLS = 200
WARMUP = 20
TARGET_MS = 2.0
TOOL = "service_status"
ARGUMENTS = {"service": "checkout-api"}
STDIO_ENV = {"PATH": "/usr/bin:/bin"}

Streams = Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]]


@contextmanager
def _quiet() -> Iterator[None]:
    """httpx logs every request and the SDK every session at INFO: not while measuring."""
    before = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(before)


def _ms(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _median_ms(call: Callable[[], Any]) -> float:
    for _ in range(WARMUP):
        call()
    return statistics.median(_ms(call) for _ in range(CALLS))


def _paired(skald: Callable[[], Any], sdk: Callable[[], Any]) -> tuple[float, float, float]:
    """Medians of ``skald`` and ``sdk`` and of their differences, measured in adjacent pairs in
    random order (so a burst of load on the machine falls on both)."""
    for _ in range(WARMUP):
        skald()
        sdk()
    ours, theirs = [], []
    for _ in range(CALLS):
        if random.random() < 0.5:
            ours.append(_ms(skald))
            theirs.append(_ms(sdk))
        else:
            theirs.append(_ms(sdk))
            ours.append(_ms(skald))
    differences = [a - b for a, b in zip(ours, theirs, strict=True)]
    return statistics.median(ours), statistics.median(theirs), statistics.median(differences)


def _cpu_ms(call: Callable[[], Any], server_pid: int) -> tuple[float, float]:
    """This process's and the server's CPU milliseconds per call, over a batch of ``CALLS``."""
    process, server = time.process_time(), cpu_seconds([server_pid]) if server_pid else 0.0
    for _ in range(CALLS):
        call()
    process_ms = (time.process_time() - process) * 1000 / CALLS
    server_ms = (cpu_seconds([server_pid]) - server) * 1000 / CALLS if server_pid else float("nan")
    return process_ms, server_ms


class _SdkAlone:
    """The SDK's client alone: one ``ClientSession`` on an event loop driven by this thread."""

    def __init__(self, streams: Streams) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = asyncio.Event()
        self._done = asyncio.Event()
        self._session: ClientSession | None = None
        self._main = self._loop.create_task(self._hold(streams))
        self._loop.run_until_complete(asyncio.wait([self._main, self._loop.create_task(self._ready.wait())],
                                                   return_when=asyncio.FIRST_COMPLETED))
        if self._session is None:
            self._main.result()  # the connection failed: its error
            raise RuntimeError("the SDK's session did not open")

    async def _hold(self, streams: Streams) -> None:
        async with streams() as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            self._session = session
            self._ready.set()
            await self._done.wait()

    def call(self) -> None:
        assert self._session is not None
        self._loop.run_until_complete(self._session.call_tool(TOOL, ARGUMENTS))

    def close(self) -> None:
        self._done.set()
        self._loop.run_until_complete(self._main)
        self._loop.close()


@asynccontextmanager
async def _http_streams(url: str) -> AsyncIterator[tuple[Any, Any]]:
    async with httpx2.AsyncClient(trust_env=False) as client, streamable_http_client(url, http_client=client) as (
            read, write):
        yield read, write


class _BarePost:
    """``tools/call`` as one plain HTTP POST on a kept-alive connection (after the handshake)."""

    def __init__(self, url: str) -> None:
        nodelay = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]  # as asyncio's sockets: no Nagle wait
        self._client = httpx2.Client(trust_env=False, transport=httpx2.HTTPTransport(socket_options=nodelay))
        self._url = url
        self._headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        answer = self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}})
        body = answer.text.split("data: ", 1)[-1] if answer.text.startswith("event:") else answer.text
        self._headers["mcp-protocol-version"] = json.loads(body)["result"]["protocolVersion"]
        self._headers["mcp-session-id"] = answer.headers["mcp-session-id"]
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self._id = 0

    def _post(self, message: dict[str, Any]) -> httpx2.Response:
        answer = self._client.post(self._url, json=message, headers=self._headers)
        answer.raise_for_status()
        return answer

    def call(self) -> None:
        self._id += 1
        answer = self._post({"jsonrpc": "2.0", "id": self._id, "method": "tools/call",
                             "params": {"name": TOOL, "arguments": ARGUMENTS}})
        if '"result"' not in answer.text:
            raise RuntimeError(f"tools/call failed: {answer.text[:200]}")

    def close(self) -> None:
        self._client.close()


@contextmanager
def _http_server(json_response: bool) -> Iterator[tuple[str, int]]:
    """The demo server over Streamable HTTP in a process of its own: its URL and pid."""
    process = subprocess.Popen([sys.executable, str(HTTP_SERVER), *(["--json"] if json_response else [])],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"{HTTP_SERVER.name} did not start (exit status {process.poll()})")
        yield f"http://127.0.0.1:{port}/mcp", process.pid
    finally:
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Figures:
    """One transport's figures, in milliseconds."""

    label: str
    skald: float
    sdk: float
    share: float
    bare: float | None
    cpu_skald: float
    cpu_sdk: float
    cpu_server: float

    def lines(self, builtin_ms: float) -> list[str]:
        overhead = self.skald - builtin_ms
        verdict = "PASS" if overhead <= TARGET_MS else "FAIL"
        lines = [f"MCP call over {self.label}:",
                 f"  through Skald's pool: {self.skald:.2f} ms median, overhead {overhead:.2f} ms over the built-in "
                 f"tool (target <= {TARGET_MS:g} ms: {verdict})",
                 f"  the SDK's client alone: {self.sdk:.2f} ms median; Skald's share (median paired difference): "
                 f"{self.share:+.2f} ms"]
        if self.bare is not None:
            lines.append(f"  a bare HTTP POST of the same call (no MCP client): {self.bare:.2f} ms median "
                         "(the server's and loopback HTTP's floor)")
        lines.append(f"  CPU per call: this process {self.cpu_skald:.2f} ms through Skald, {self.cpu_sdk:.2f} ms "
                     f"with the SDK alone; the server process {self.cpu_server:.2f} ms")
        return lines


def _measure(pool: McpPool, label: str, spec: ServerSpec, sdk_streams: Streams, *, server_pid: int = 0,
             bare_url: str = "") -> Figures:
    def through_skald() -> None:
        pool.call(spec, TOOL, ARGUMENTS, cancel=CancelToken(), timeout=30)

    pool.listing(spec)  # the pooled session is open before timing
    server_pid = server_pid or pool.process_of(spec.name)
    sdk = _SdkAlone(sdk_streams)
    try:
        skald_ms, sdk_ms, share = _paired(through_skald, sdk.call)
        cpu_skald, cpu_server = _cpu_ms(through_skald, server_pid)
        cpu_sdk, _ = _cpu_ms(sdk.call, 0)
    finally:
        sdk.close()
    bare_ms = None
    if bare_url:
        bare = _BarePost(bare_url)
        try:
            bare_ms = _median_ms(bare.call)
        finally:
            bare.close()
    return Figures(label, skald_ms, sdk_ms, share, bare_ms, cpu_skald, cpu_sdk, cpu_server)


def report() -> str:
    builtin = FunctionTool("service_status", "", {}, lambda arguments, context: f"status of {arguments['service']}")
    builtin_ms = _median_ms(lambda: builtin.run(ARGUMENTS, None))  # type: ignore[arg-type]
    load = os.getloadavg()[0]
    lines = [f"built-in tool run: {builtin_ms:.3f} ms (median of {CALLS}); load average {load:.2f} at start"]
    pool = McpPool()
    with _quiet():
        try:
            stdio = ServerSpec(name="bench-stdio", transport="stdio", argv=(sys.executable, str(DEMO)), env=STDIO_ENV)
            sdk_stdio = StdioServerParameters(command=sys.executable, args=[str(DEMO)], env=STDIO_ENV)
            figures = [_measure(pool, "stdio", stdio, lambda: stdio_client(sdk_stdio))]
            for json_response, answers in ((False, "SSE"), (True, "JSON")):
                with _http_server(json_response) as (url, pid):
                    spec = ServerSpec(name=f"bench-http-{answers.lower()}", transport="http", url=url)
                    figures.append(_measure(pool, f"HTTP on loopback ({answers} answers)", spec,
                                            lambda url=url: _http_streams(url), server_pid=pid, bare_url=url))
                    pool.close(spec.name)
        finally:
            pool.close_all()
    for figure in figures:
        lines.extend(figure.lines(builtin_ms))
    share = max(figure.share for figure in figures)
    lines.append(f"Skald's share at most {share:+.2f} ms a call (target <= {TARGET_MS:g} ms: "
                 f"{'PASS' if share <= TARGET_MS else 'FAIL'}); the rest of each call is the SDK's client and the "
                 "server's (a FAIL above with a PASS here is theirs).")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
