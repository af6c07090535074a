"""The demo's own MCP server (``make run``), started over stdio from the repository by Skald's MCP
client: ``python demo/mcp_server.py``. Standalone (the SDK only, no Django, no Skald); kept out of
the ``skald`` package, whose ``skald/mcp`` would shadow the SDK's ``mcp`` for a script run there.

Two tools about the demo case's checkout service: ``service_status`` (read-only: on the demo's
trusted server it runs without approval) and ``restart_service`` (destructive: gated by the default
rules). Nothing real is restarted: it answers as if it had been.
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("skald-demo", instructions="Status and restarts of the demo's services.")

STATUS = {
    "checkout-api": "degraded: 3 of 5 pods crash-looping since 09:11 (database connection pool exhausted)",
    "db-primary": "up: 200 of 200 connections in use",
}


@server.tool(description="Read the current status of a service (checkout-api, db-primary).",
             annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
def service_status(service: str) -> str:
    return STATUS.get(service, f"unknown service {service!r}; known: {', '.join(STATUS)}")


@server.tool(description="Restart a service's pods (interrupts its traffic while they come back).",
             annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                         open_world_hint=False))
def restart_service(service: str) -> str:
    if service not in STATUS:
        return f"unknown service {service!r}"
    return f"{service}: rolling restart started (demo: nothing real was restarted)"


if __name__ == "__main__":
    server.run("stdio")
