"""The cost of an MCP call (issue 29) beside a built-in tool's: the round trip through the process's
pooled client (``skald.mcp.client.McpPool``) to the demo's server (``demo/mcp_server.py``) over
stdio and over Streamable HTTP on loopback (the same server served by uvicorn in a thread), against
a built-in tool's ``run`` (a function call). In process, no database: what the pool adds per call.

Target: pooled sessions, at most 2 ms of median overhead per call over the built-in tool. The
server's own work (the SDK's server side, in Python) is inside the figure: it is an upper bound on
Skald's share.
"""

from __future__ import annotations

import importlib.util
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from loop.cancellation import CancelToken
from loop.tools.registry import FunctionTool
from skald.mcp.client import McpPool, ServerSpec

DEMO = Path(__file__).resolve().parent.parent / "demo" / "mcp_server.py"
CALLS = 200
WARMUP = 20
TARGET_MS = 2.0


def _median_ms(call: Any) -> float:
    for _ in range(WARMUP):
        call()
    timings = []
    for _ in range(CALLS):
        started = time.perf_counter()
        call()
        timings.append((time.perf_counter() - started) * 1000)
    return statistics.median(timings)


def _http_server() -> tuple[str, Any]:
    import uvicorn

    spec = importlib.util.spec_from_file_location("skald_demo_mcp_server", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(module.server.streamable_http_app(), log_level="warning",
                                           timeout_graceful_shutdown=1))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", server


def report() -> str:
    builtin = FunctionTool("service_status", "", {}, lambda arguments, context: f"status of {arguments['service']}")
    arguments = {"service": "checkout-api"}
    builtin_ms = _median_ms(lambda: builtin.run(arguments, None))  # type: ignore[arg-type]
    pool = McpPool()
    url, http = _http_server()
    lines = [f"built-in tool run: {builtin_ms:.3f} ms (median of {CALLS})"]
    try:
        for label, spec in (
            ("stdio", ServerSpec(name="bench-stdio", transport="stdio", argv=(sys.executable, str(DEMO)),
                                 env={"PATH": "/usr/bin:/bin"})),
            ("http (loopback)", ServerSpec(name="bench-http", transport="http", url=url)),
        ):
            pool.listing(spec)  # the pooled session is open before timing
            ms = _median_ms(lambda spec=spec: pool.call(spec, "service_status", arguments, cancel=CancelToken(),
                                                         timeout=30))
            overhead = ms - builtin_ms
            verdict = "PASS" if overhead <= TARGET_MS else "FAIL"
            lines.append(f"MCP call over {label}: {ms:.2f} ms median, overhead {overhead:.2f} ms "
                         f"(target <= {TARGET_MS:g} ms: {verdict})")
    finally:
        pool.close_all()
        http.should_exit = True
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
