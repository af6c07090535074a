"""What a call through the MCP pool is made of and how it fails: plain values, no SDK import.

The SDK (``mcp``) costs about a second of CPU to import on a slow machine, and every Django process
(web, workers, the maintenance child, manage.py) loads the tools and services that name these types;
only a process that opens a connection imports :mod:`skald.mcp.client` and the SDK with it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loop.tools.infra import ToolInfrastructureFailure


class McpUnavailable(ToolInfrastructureFailure):
    """The server could not be reached, died or broke the transport: infrastructure, not the tool."""

    def __init__(self, server: str, detail: str) -> None:
        super().__init__(f"MCP server {server!r} unavailable: {detail}")
        self.server = server
        self.detail = detail


class McpCallError(Exception):
    """The server answered the call with a protocol error (unknown tool, bad params …)."""


class McpCallCancelled(Exception):
    """The call was cancelled by a stop (``killed``: the server did not answer and was killed)."""

    def __init__(self, killed: bool) -> None:
        super().__init__("cancelled" + (" (server killed)" if killed else ""))
        self.killed = killed


@dataclass(frozen=True)
class ServerSpec:
    """What a connection is opened from; a changed spec (``fingerprint``) reopens it."""

    name: str
    transport: str  # stdio | http
    argv: tuple[str, ...] = ()
    url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    address: str = ""  # http: the address the SSRF screen passed; the connection goes there only
    sandbox: Any = None  # stdio: a loop.tools.sandbox.Bubblewrap the program starts in (None: unconfined)

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        return (self.transport, self.argv, self.url, tuple(sorted(self.env.items())),
                tuple(sorted(self.headers.items())), self.cwd, self.address, self.sandbox)


Progress = Callable[[float, float | None, str | None], None]


@dataclass(frozen=True)
class CallResult:
    content: list[dict[str, Any]]
    structured: Any
    is_error: bool


# --- what a server may ask of the client during a call (docs/mcp.md, "Elicitation", "Sampling") ---

@dataclass(frozen=True)
class ElicitRequest:
    """A server's ``elicitation/create`` (form mode): a message and the JSON Schema of the answer."""

    message: str
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class ElicitAnswer:
    action: str  # accept | decline | cancel
    content: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class SampleRequest:
    """A server's ``sampling/createMessage``, text only: ``messages`` as (role, text) pairs."""

    messages: tuple[tuple[str, str], ...]
    system: str
    max_tokens: int
    temperature: float | None = None


@dataclass(frozen=True)
class SampleAnswer:
    text: str
    model: str
    stop_reason: str = "endTurn"


class SamplingRefused(Exception):
    """A sampling request Skald does not serve; the server receives the message as an MCP error."""


# Run on the pool's event loop: it must never block it (it awaits its waits).
Elicit = Callable[[ElicitRequest], Awaitable[ElicitAnswer]]
# Run on a thread of its own, off the event loop (a provider call blocks).
Sample = Callable[[SampleRequest], SampleAnswer]
