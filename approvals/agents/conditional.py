"""Conditional writes of an agent's governance settings (tools, bounds with its default budget, the
exec allow-list, the MCP servers whose tools it gets) for the policy API: lock the row, compare its
ETag, write through ``agent_save`` and ``mcp_server_update`` (the admin's services: the same checks,
the same audit rows).

Which MCP servers serve an agent is recorded on each server (its ``agents``: names, or ``*`` for
every agent); the agent's ``mcp_servers`` is that fact read from the agent's side, and changing it
changes those servers' lists. A server that serves every agent cannot leave one out: 409."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from audit.actors import Actor
from skald.agents.services import agent_save
from skald.core.api.conditional import etag_of, precondition_check
from skald.core.errors import Conflict, NotFound
from skald.mcp.models import McpServer
from skald.mcp.services import mcp_server_update
from skald.models import Agent

# API name → model field. Agents themselves are created and deleted in the admin (prompts, clients).
AGENT_FIELDS = {"tools": "allowed_tools", "bounds": "bounds", "exec_allowlist": "exec_allowlist"}


def agent_view(agent: Agent, servers: list[McpServer] | None = None) -> dict[str, Any]:
    """The agent's governance settings (and what its ETag covers). ``servers``: every MCP server,
    read once for a list of agents."""
    every = servers if servers is not None else list(McpServer.objects.order_by("name"))
    return {"id": agent.pk, "name": agent.name, "tools": list(agent.allowed_tools or []),
            "bounds": dict(agent.bounds or {}), "exec_allowlist": agent.exec_allowlist,
            "mcp_servers": sorted(server.name for server in every if server.serves(agent.name))}


def agent_get(agent_id: int) -> Agent:
    agent = Agent.objects.filter(pk=agent_id).first()
    if agent is None:
        raise NotFound(f"No agent has id {agent_id}.", code="agent_not_found")
    return agent


def agent_policy_update(*, actor: Actor, agent_id: int, if_match: tuple[str, ...], fields: Mapping[str, Any]) -> Agent:
    """Set the fields given (``bounds`` replaces the overrides), if the agent is still the version
    ``if_match`` names (``agent_not_found`` 404, 412; ``bounds_invalid`` 400 from the service)."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(pk=agent_id).first()
        if agent is None:
            raise NotFound(f"No agent has id {agent_id}.", code="agent_not_found")
        before = agent_view(agent)
        precondition_check(if_match, etag_of(before))
        if "mcp_servers" in fields and sorted(set(fields["mcp_servers"])) != before["mcp_servers"]:
            _serve(actor, agent.name, set(fields["mcp_servers"]))
        changed = [name for name in AGENT_FIELDS if name in fields and fields[name] != before[name]]
        if not changed:
            return agent
        for name in changed:
            setattr(agent, AGENT_FIELDS[name], fields[name])
        return agent_save(actor=actor, agent=agent, changed=[AGENT_FIELDS[name] for name in changed])


def _serve(actor: Actor, agent: str, wanted: set[str]) -> None:
    """Make exactly the servers named in ``wanted`` serve ``agent``, each change through
    ``mcp_server_update`` (``mcp_server_not_found`` 404, ``mcp_server_serves_every_agent`` 409)."""
    servers = {server.name: server for server in McpServer.objects.select_for_update().order_by("name")}
    unknown = sorted(wanted - set(servers))
    if unknown:
        raise NotFound(f"No MCP server is named {unknown[0]!r}.", code="mcp_server_not_found", servers=unknown)
    for name, server in servers.items():
        agents = list(server.agents or [])
        if name in wanted and not server.serves(agent):
            mcp_server_update(actor=actor, server=server, data={"agents": [*agents, agent]})
        elif name not in wanted and server.serves(agent):
            if "*" in agents:
                raise Conflict(f"MCP server {name!r} serves every agent ('*'): list its agents by name on the "
                               "server first.", code="mcp_server_serves_every_agent", server=name)
            mcp_server_update(actor=actor, server=server, data={"agents": [a for a in agents if a != agent]})
