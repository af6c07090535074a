"""Model selection for delegates (SPEC S3): a child's model is never inherited from its parent.

Explicit ``client`` argument → the agent's configured client → automatic selection by the agent's
strength over the deployment's provider profiles. With one profile (or none: the deterministic
playbook) the selection still runs, and its record says which rule chose which model; the child's
frame (or job) and its audit row keep that record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loop.errors import ToolError
from loop.ports import AgentSpec
from skald import provider_config

CLIENTS = ("playbook", "openai_compat")
# How strong each client is for the auto rule: the deterministic playbook only follows a script.
CLIENT_STRENGTH = {"playbook": 1, "openai_compat": 3}


@dataclass(frozen=True, slots=True)
class Selection:
    rule: str  # "explicit" | "agent" | "auto:strength"
    client: str
    model: str
    agent_strength: int
    candidates: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "client": self.client, "model": self.model,
                "agent_strength": self.agent_strength, "candidates": list(self.candidates)}


def _model_of(client: str) -> str:
    if client == "openai_compat":
        profile = provider_config.provider_profile()
        return profile.model if profile is not None else ""
    return client


def available_clients() -> tuple[str, ...]:
    """The profiles a delegate may run on: the configured HTTP profile, else the playbook."""
    return ("openai_compat",) if provider_config.provider_status() == "configured" else ("playbook",)


def select_model(agent: AgentSpec, explicit: str = "") -> Selection:
    """Choose a delegate's client.

    Raises:
        ToolError: ``client_unknown`` for an explicit or configured client this deployment lacks.
    """
    candidates = available_clients()
    if explicit or agent.client:
        client, rule = (explicit, "explicit") if explicit else (agent.client, "agent")
        if client not in CLIENTS:
            raise ToolError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}", code="client_unknown")
        if client == "openai_compat" and "openai_compat" not in candidates:
            raise ToolError("client 'openai_compat' has no provider profile here", code="client_unknown")
        return Selection(rule, client, _model_of(client), agent.strength, candidates)
    # The weakest candidate strong enough for the agent, else the strongest there is.
    ranked = sorted(candidates, key=lambda name: CLIENT_STRENGTH[name])
    strong_enough = [name for name in ranked if CLIENT_STRENGTH[name] >= agent.strength]
    client = strong_enough[0] if strong_enough else ranked[-1]
    return Selection("auto:strength", client, _model_of(client), agent.strength, candidates)
