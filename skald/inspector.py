"""A pure, environment-blind inspector of the assembled services (SPEC O2).

It renders what a turn would run with — the profile's name, the mounted service keys, scalar
configuration and the provider's *name* — from the assembled objects alone. It never reads the
environment and never shows a URL, path, model name or secret. The sandbox is shown by name
(``bubblewrap``) when commands are confined, ``unavailable`` when they are not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from django.conf import settings
from django.db import connection

from loop.bounds import Bounds
from loop.ports import AgentSpec
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.hooks import audited_hooks
from skald.loop_adapters.runtime import default_gate, deployment_bounds, deployment_compaction, provider_for
from skald.loop_adapters.sandbox import exec_confinement
from skald.loop_adapters.store import kernel_store
from skald.tools.catalog import BUILTIN_TOOLS

SCALARS = (str, int, float, bool, type(None))


def profile_name() -> str:
    """``production`` or ``embedded``, from the assembled settings (never from raw variables)."""
    return "production" if connection.vendor == "postgresql" and settings.REDIS_URL else "embedded"


def inspect(services: Mapping[str, Any], *, profile: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The rendering: mounted keys, scalar config only, provider name only."""
    provider = services.get("llm")
    tools = services.get("tools")
    return {
        "profile": profile,
        "mounted": sorted(key for key, value in services.items() if value is not None),
        "config": {key: value for key, value in sorted(config.items()) if isinstance(value, SCALARS)},
        "provider": getattr(provider, "name", "none"),
        "tools": sorted(tools.names()) if tools is not None else [],
        "sandbox": getattr(services.get("sandbox"), "name", "unavailable"),
    }


def inspect_agent(agent: AgentSpec) -> dict[str, Any]:
    """Assemble the services an agent's turn would get and inspect them."""
    bounds: Bounds = deployment_bounds().override(agent.bounds)
    compaction = deployment_compaction()
    services = {
        "llm": provider_for(agent),
        "tools": BUILTIN_TOOLS.subset(agent.tools),
        "gate": default_gate(),
        "hooks": audited_hooks(),
        "bus": ChannelsBus(),
        "sessions": kernel_store(),
        "agents": agent,
        "compaction": compaction,
        "sandbox": exec_confinement(),
    }
    scalars = {f"compaction.{name}": value for name, value in asdict(compaction).items()}
    return inspect(services, profile=profile_name(), config={"agent": agent.name, **bounds.as_dict(), **scalars})
