"""The tools every enabled server offers, read from the database for each frame's environment,
with a short process cache (a turn builds its environment often; a pin changes rarely).

A write in this process forgets the cache at once; another process sees it within
:data:`TTL_SECONDS`. Offering a tool a moment late is harmless: every call re-reads its row and
refuses a tool that is no longer active (:mod:`skald.mcp.tools`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

TTL_SECONDS = 2.0


@dataclass(frozen=True)
class Offer:
    """One active tool of an enabled server, as offered to a model."""

    server: str
    tool: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    trusted: bool
    agents: tuple[str, ...]

    def serves(self, agent: str) -> bool:
        return "*" in self.agents or agent in self.agents


_lock = threading.Lock()
_cached: tuple[float, tuple[Offer, ...]] | None = None


def offers() -> tuple[Offer, ...]:
    """Every active tool of every enabled server (one query, cached for :data:`TTL_SECONDS`)."""
    global _cached
    with _lock:
        if _cached is not None and time.monotonic() - _cached[0] < TTL_SECONDS:
            return _cached[1]
    from skald.mcp.models import McpTool, McpToolStatus, McpTrust

    rows = (McpTool.objects.filter(status=McpToolStatus.ACTIVE, server__enabled=True)
            .select_related("server").order_by("server__name", "name"))
    found = tuple(Offer(server=t.server.name, tool=t.name, description=t.description,
                        input_schema=dict(t.input_schema or {}), annotations=dict(t.annotations or {}),
                        trusted=t.server.trust == McpTrust.TRUSTED, agents=tuple(t.server.agents or ()))
                  for t in rows)
    with _lock:
        _cached = (time.monotonic(), found)
    return found


def forget() -> None:
    global _cached
    with _lock:
        _cached = None
