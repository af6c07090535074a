"""The runtime that wires the kernel to Skald for one session: agent, bounds, tools, provider,
gate, scope. Entry points (tasks, services) build a :class:`~loop.driver.LoopEnv` here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from loop.bounds import Bounds
from loop.compaction.policy import CompactionPolicy
from loop.driver import LoopEnv
from loop.errors import HarnessError
from loop.events import EventKind
from loop.hooks import LoopHooks
from loop.models import Exchange, Session, SessionEvent
from loop.ports import AgentSpec, ChildSetup, Gate, TurnScope
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


def provider_for(agent: AgentSpec, client: str = "") -> LlmProvider:
    """``client`` (a delegate's selection) → the agent's configured client → configured profile →
    deterministic playbook. Tests replace the whole choice with :func:`set_provider_factory`."""
    if _provider_factory is not None:
        return _provider_factory(agent)
    status = provider_config.provider_status()
    if status == "invalid":
        raise HarnessError("the GDL provider profile is invalid", code="provider_profile_invalid")
    client = client or agent.client or ("openai_compat" if status == "configured" else "playbook")
    if client == "playbook":
        return PlaybookProvider(agent.playbook, word_pause=settings.SKALD_PLAYBOOK_WORD_PAUSE_MS / 1000)
    if client == "openai_compat":
        profile = provider_config.provider_profile()
        if profile is None:
            raise HarnessError("no provider profile is configured for openai_compat", code="provider_not_configured")
        from loop.providers.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider(profile)
    raise HarnessError(f"unknown client {client!r}", code="provider_unknown")


class CatalogFrameAgents:
    """Rebuilds a child frame for recovery and resolvers: its agent from the catalog (never the
    root's), the client its selection chose, the agent's bounds (SPEC R1 step 4, S3)."""

    def child(self, agent: str, selection: Mapping[str, Any]) -> ChildSetup:
        spec = AgentRowCatalog().get(agent)
        return ChildSetup(agent=spec, provider=provider_for(spec, str(selection.get("client") or "")),
                          bounds=deployment_bounds().override(spec.bounds))


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
    """What a session's tools may know about its run: the case (``read_logs``) and the run. A
    console session has no run; its case is the latest it was attached to (a ``control:note``)."""
    run = Run.objects.filter(session_id=session.pk).values("pk", "case_id").first()
    if run is not None:
        return {"case_id": run["case_id"], "run_id": run["pk"]}
    notes = SessionEvent.objects.filter(session_id=session.pk, kind=EventKind.NOTE).order_by("-seq")
    attached = next((n.payload["attached_case"] for n in notes[:20] if "attached_case" in (n.payload or {})), None)
    return {"case_id": attached} if attached else {}


def admitted_by(session: Session, exchange_id: int) -> int | None:
    """Whose turn an exchange is: the user who admitted it (recorded in its config at admission),
    else the session's owner (exchanges admitted before the principal was recorded)."""
    if exchange_id:
        config = Exchange.objects.filter(pk=exchange_id).values_list("config", flat=True).first() or {}
        principal = str(config.get("principal", ""))
        if principal.startswith("user:") and principal[5:].isdigit():
            return int(principal[5:])
    return session.owner_id


def build_env(session: Session, *, exchange_id: int = 0, hooks: LoopHooks | None = None,
              acting_user_id: int | None = None) -> LoopEnv:
    """The kernel's environment for one turn of ``session``.

    The principal (audit actor, and the user whose security groups gate the tools) is the acting
    user: ``acting_user_id`` at admission, else the user who admitted ``exchange_id``. Never
    silently the owner when someone else wrote the message (docs/access-model.md).
    """
    agent = AgentRowCatalog().get(session.agent)
    bounds = deployment_bounds().override(agent.bounds)
    user_id = acting_user_id if acting_user_id is not None else admitted_by(session, exchange_id)
    scope = TurnScope(
        session_id=session.pk, exchange_id=exchange_id, principal=f"user:{user_id}",
        user_id=user_id, agent=agent.name, workspace=workspace_for(session.pk), source=session.source,
        extras=session_extras(session),
    )
    return LoopEnv(
        store=kernel_store(), provider=provider_for(agent), tools=plugins.sockets.tools.subset(agent.tools),
        gate=default_gate(), agent=agent, scope=scope, bus=ChannelsBus(), bounds=bounds,
        hooks=hooks or audited_hooks(), discovery=KnownToolRecorder(), calls_canceled=plugins.notify_calls_cancelled,
        detector=plugins.tripwire_detector(), compaction=deployment_compaction(), frame_agents=CatalogFrameAgents(),
    )
