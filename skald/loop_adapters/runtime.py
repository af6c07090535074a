"""The runtime that wires the kernel to Skald for one session: agent, bounds, tools, provider,
gate, scope. Entry points (tasks, services) build a :class:`~loop.driver.LoopEnv` here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings

from loop.bounds import Bounds
from loop.compaction.policy import CompactionPolicy
from loop.driver import LoopEnv
from loop.errors import HarnessError
from loop.hooks import LoopHooks
from loop.models import Session
from loop.ports import AgentSpec, Gate, TurnScope
from loop.providers.base import LlmProvider
from loop.providers.playbook import PlaybookProvider
from skald import plugins, provider_config
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.discovery import KnownToolRecorder
from skald.loop_adapters.hooks import audited_hooks
from skald.loop_adapters.store import kernel_store
from skald.models import Run
from skald.sessions.workspace import workspace_for

ProviderFactory = Callable[[AgentSpec], LlmProvider]
GateFactory = Callable[[], Gate]

_provider_factory: ProviderFactory | None = None
_gate_factory: GateFactory | None = None


def set_provider_factory(factory: ProviderFactory | None) -> None:
    """Replace how providers are chosen (tests script a LoopbackProvider here). None restores."""
    global _provider_factory
    _provider_factory = factory


def set_gate_factory(factory: GateFactory | None) -> None:
    global _gate_factory
    _gate_factory = factory


def provider_for(agent: AgentSpec) -> LlmProvider:
    """Explicit client → configured profile → deterministic playbook (never inherited)."""
    if _provider_factory is not None:
        return _provider_factory(agent)
    status = provider_config.provider_status()
    if status == "invalid":
        raise HarnessError("the GDL provider profile is invalid", code="provider_profile_invalid")
    client = agent.client or ("openai_compat" if status == "configured" else "playbook")
    if client == "playbook":
        return PlaybookProvider(agent.playbook)
    if client == "openai_compat":
        profile = provider_config.provider_profile()
        if profile is None:
            raise HarnessError("no provider profile is configured for openai_compat", code="provider_not_configured")
        from loop.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(profile)
    raise HarnessError(f"unknown client {client!r}", code="provider_unknown")


def default_gate() -> Gate:
    """Tests may install their own gate; otherwise the one wired into the sockets (approvals)."""
    if _gate_factory is not None:
        return _gate_factory()
    return plugins.gate()


def deployment_bounds() -> Bounds:
    return Bounds().override(settings.SKALD_LOOP_BOUNDS)


def deployment_compaction() -> CompactionPolicy:
    return CompactionPolicy().override(settings.SKALD_COMPACTION)


def session_extras(session: Session) -> dict[str, Any]:
    """What a session's tools may know about its run: the case (``read_logs``) and the run."""
    run = Run.objects.filter(session_id=session.pk).values("pk", "case_id").first()
    return {"case_id": run["case_id"], "run_id": run["pk"]} if run is not None else {}


def build_env(session: Session, *, exchange_id: int = 0, hooks: LoopHooks | None = None) -> LoopEnv:
    agent = AgentRowCatalog().get(session.agent)
    bounds = deployment_bounds().override(agent.bounds)
    scope = TurnScope(
        session_id=session.pk, exchange_id=exchange_id, principal=f"user:{session.owner_id}",
        user_id=session.owner_id, agent=agent.name, workspace=workspace_for(session.pk), source=session.source,
        extras=session_extras(session),
    )
    return LoopEnv(
        store=kernel_store(), provider=provider_for(agent), tools=plugins.sockets.tools.subset(agent.tools),
        gate=default_gate(), agent=agent, scope=scope, bus=ChannelsBus(), bounds=bounds,
        hooks=hooks or audited_hooks(), discovery=KnownToolRecorder(), calls_canceled=plugins.notify_calls_cancelled,
        compaction=deployment_compaction(),
    )
