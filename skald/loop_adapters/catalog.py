"""The AgentCatalog port over ``skald.Agent`` rows."""

from __future__ import annotations

from collections.abc import Sequence

from loop.errors import HarnessError
from loop.ports import AgentSpec
from skald.mcp.tools import mcp_tool_names_for
from skald.models import Agent, AgentKind


def _spec(agent: Agent) -> AgentSpec:
    """An agent's tools: its catalog entry's, and the MCP tools of every enabled server that lists it."""
    tools = (*(agent.allowed_tools or ()), *mcp_tool_names_for(agent.name))
    return AgentSpec(
        name=agent.name, kind=agent.kind, system_prompt=agent.system_prompt, tools=tools,
        client=agent.client, strength=agent.strength, description=agent.description, bounds=dict(agent.bounds or {}),
        playbook=tuple(agent.playbook or ()),
        exec_allowlist=None if not agent.exec_allowlist else tuple(str(p) for p in agent.exec_allowlist),
    )


class AgentRowCatalog:
    def get(self, name: str) -> AgentSpec:
        agent = Agent.objects.filter(name=name, enabled=True).first()
        if agent is None:
            raise HarnessError(f"no enabled agent named {name!r}", code="agent_unknown")
        return _spec(agent)

    def task_agents(self) -> Sequence[AgentSpec]:
        return [_spec(a) for a in Agent.objects.filter(kind=AgentKind.TASK, enabled=True)]
