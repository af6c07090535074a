"""Fixtures for MCP through Skald's own wiring: a real server (the SDK's server API), registered,
enabled and attached to an agent; the real approval rules; scripted models.

The server process is shared by a module: its state directory is the module's, so the pooled
connection (keyed by the server's spec) survives the per-test database flush.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from approvals.rules.seed import default_rules_ensure
from audit.actors import Actor
from loop.models import Exchange
from skald.loop_adapters.discovery import forget_seen
from skald.mcp import tools_cache
from skald.mcp.client import pool
from skald.mcp.models import McpServer
from skald.mcp.services import mcp_server_create
from skald.models import Agent, AgentKind
from skald.sessions.services import session_create, session_message_submit

SERVER_SCRIPT = str(Path(__file__).with_name("server_app.py"))


@pytest.fixture(autouse=True)
def forget_offers() -> Iterator[None]:
    """The offered tools are cached per process for a moment, and the tools seen recorded once per
    process: no test after this one sees this one's (the database is flushed between them)."""
    yield
    tools_cache.forget()
    forget_seen()


@pytest.fixture(scope="module", autouse=True)
def close_connections() -> Iterator[None]:
    """A module's server processes end with it."""
    yield
    pool().close_all()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-state")


def counter(state: Path, name: str) -> int:
    path = state / name
    return int(path.read_text()) if path.exists() else 0


def wait_for_file(path: Path, limit: float = 30.0) -> str:
    """Polled: the file is the server's, in another process; the limit only bounds a failure."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


@pytest.fixture
def secret_files(tmp_path: Path, state: Path) -> dict[str, Path]:
    state_file = tmp_path / "state"
    state_file.write_text(str(state))
    variant = tmp_path / "variant"
    variant.write_text("")
    return {"MCP_TEST_STATE": state_file, "MCP_TEST_VARIANT": variant}


@pytest.fixture
def mcp_setup(settings: Any, state: Path) -> None:
    settings.SKALD_MCP_STDIO_ALLOWLIST = (sys.executable,)
    # The test server keeps its counters in the module's state directory, outside any sandbox (the
    # confinement's own test: test_mcp_sandbox.py).
    settings.SKALD_MCP_STDIO_SANDBOX = "off"
    # the module's (a stdio server's directory is part of its connection's spec: one process per module)
    settings.SKALD_WORKSPACE_ROOT = state.parent / f"{state.name}-workspaces"
    settings.SKALD_SYNC_TASKS = True
    default_rules_ensure()
    tools_cache.forget()
    Agent.objects.create(name="operator", kind=AgentKind.CHAT, allowed_tools=["read_file"])


@pytest.fixture
def stdio_server(mcp_setup: None, alice: Any, secret_files: dict[str, Path]) -> Callable[..., McpServer]:
    def make(*, trust: str = "trusted", agents: list[str] | None = None, name: str = "demo") -> McpServer:
        return mcp_server_create(actor=Actor.user(alice), data={
            "name": name, "transport": "stdio", "argv": [sys.executable, SERVER_SCRIPT], "trust": trust,
            "agents": agents if agents is not None else ["operator"], "enabled": True,
            "secret_env": {key: str(path) for key, path in secret_files.items()}})

    return make


@pytest.fixture
def ask(alice: Any) -> Callable[[str], Exchange]:
    """A message to a fresh ``operator`` conversation; returns its exchange once driven (inline)."""

    def send(content: str) -> Exchange:
        session = session_create(user=alice, agent="operator", title="mcp")
        exchange, _ = session_message_submit(user=alice, session=session, content=content)
        exchange.refresh_from_db()
        return exchange

    return send
