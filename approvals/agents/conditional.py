"""Conditional writes of an agent's governance settings (tools, bounds with its default budget, the
exec allow-list) for the policy API: lock the row, compare its ETag, write through ``agent_save``
(the admin's service: the same bounds check, the same audit row)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from audit.actors import Actor
from skald.agents.services import agent_save
from skald.core.api.conditional import etag_of, precondition_check
from skald.core.errors import NotFound
from skald.models import Agent

# API name → model field. Agents themselves are created and deleted in the admin (prompts, clients).
AGENT_FIELDS = {"tools": "allowed_tools", "bounds": "bounds", "exec_allowlist": "exec_allowlist"}


def agent_view(agent: Agent) -> dict[str, Any]:
    """The agent's governance settings, as the policy document holds them (and its ETag covers)."""
    return {"id": agent.pk, "name": agent.name, "tools": list(agent.allowed_tools or []),
            "bounds": dict(agent.bounds or {}), "exec_allowlist": agent.exec_allowlist}


def agent_etag(agent: Agent) -> str:
    return etag_of(agent_view(agent))


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
        changed = [name for name in AGENT_FIELDS if name in fields and fields[name] != before[name]]
        if not changed:
            return agent
        for name in changed:
            setattr(agent, AGENT_FIELDS[name], fields[name])
        return agent_save(actor=actor, agent=agent, changed=[AGENT_FIELDS[name] for name in changed])
