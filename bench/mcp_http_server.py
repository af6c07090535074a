"""The demo's MCP server (``demo/mcp_server.py``) over Streamable HTTP on loopback, in a process of
its own, for :mod:`bench.mcp_call`: ``python bench/mcp_http_server.py [--json]`` prints its port on
stdout once it listens and serves until stdin closes. ``--json``: answers as JSON bodies instead of
SSE streams (the server's choice, the SDK's ``json_response``).

Run as a script (not ``-m``): the SDK only, no Django, no Skald.
"""

from __future__ import annotations

import importlib.util
import logging
import socket
import sys
import threading
import time
from pathlib import Path

import uvicorn

DEMO = Path(__file__).resolve().parent.parent / "demo" / "mcp_server.py"


def main() -> None:
    logging.disable(logging.INFO)
    spec = importlib.util.spec_from_file_location("skald_demo_mcp_server", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY only then
    sock.bind(("127.0.0.1", 0))
    app = module.server.streamable_http_app(json_response="--json" in sys.argv)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=1))

    def watch_stdin() -> None:
        sys.stdin.read()  # the bench closes it (or dies): stop
        server.should_exit = True

    threading.Thread(target=watch_stdin, daemon=True).start()
    started = threading.Thread(target=lambda: _announce(server, sock), daemon=True)
    started.start()
    server.run(sockets=[sock])


def _announce(server: uvicorn.Server, sock: socket.socket) -> None:
    while not server.started:
        time.sleep(0.01)
    print(sock.getsockname()[1], flush=True)


if __name__ == "__main__":
    main()
