"""The runtime that wires the kernel to Skald for one session: agent, bounds, tools, provider,
gate, scope. Entry points (tasks, services) build a :class:`~loop.driver.LoopEnv` here."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db.models import OuterRef, Subquery

from loop.bounds import Bounds
from loop.compaction.policy import CompactionPolicy
from loop.delegation import FrameGrant, frame_env
from loop.driver import LoopEnv
from loop.errors import HarnessError
from loop.hooks import LoopHooks
from loop.models import Exchange, Session
from loop.ports import AgentSpec, ChildSetup, Gate, TurnScope
from loop.providers.base import LlmProvider
from loop.providers.playbook import PlaybookProvider
from loop.tools.exec_bridge import parse_allowlist
from loop.tools.registry import ToolRegistry
from skald import plugins, provider_config
from skald.jobs.models import JobRun, ScheduledJob
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.discovery import KnownToolRecorder
from skald.loop_adapters.hooks import audited_hooks
from skald.loop_adapters.store import kernel_store
from skald.mcp.tools import mcp_tools
from skald.models import Run
from skald.sessions.selectors import session_case
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


def deployment_exec_allowlist() -> tuple[str, ...] | None:
    """A root frame's process grant: the deployment's ``BRAIN_ENGINE_EXEC_ALLOWLIST``. A malformed
    value stays unnarrowed here (``execute_cmd`` refuses it when called; check skald.E004 says so)."""
    try:
        return parse_allowlist(settings.BRAIN_ENGINE_EXEC_ALLOWLIST)
    except HarnessError:
        return None


class SessionExtras(Mapping[str, Any]):
    """:func:`session_extras`, read when a tool first asks (``read_logs``, a spawned task): most
    turns never do, and the query's annotations cost more to build than to run (issue 34)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._facts: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any]:
        if self._facts is None:
            self._facts = session_extras(self._session)
        return self._facts

    def __getitem__(self, key: str) -> Any:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def session_extras(session: Session) -> dict[str, Any]:
    """What a session's tools may know about its run: the case (``read_logs``, by
    :func:`skald.sessions.selectors.session_case`) and the run. One query."""
    facts: Mapping[str, Any] = (Session.objects.filter(pk=session.pk)
                             .annotate(found_case=session_case(),
                                       found_run=Subquery(Run.objects.filter(session_id=OuterRef("pk"))
                                                          .values("pk")[:1]))
                             .values("found_case", "found_run").first()) or {}
    extras = {"case_id": facts.get("found_case"), "run_id": facts.get("found_run")}
    return {key: value for key, value in extras.items() if value is not None}


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
    """The kernel's environment for one turn of ``session``: the one way a root frame's
    environment is built, from durable records (issue 27).

    A conversation's own root runs as its agent. A job's conversation (an async task's child
    conversation, a cron firing's) runs as the frame its creator spawned: its owner's root
    environment narrowed by the grant recorded on the job at spawn (tools, process grant) through
    :func:`loop.delegation.frame_env`, exactly as a sync child is; so a first run, a resume after
    an approval and a recovery after a crash build the same environment. Either way it carries the
    same gate, the organisation's tripwire detector, the deployment's compaction policy, hooks and
    cancellation wiring.

    The principal (audit actor, and the user whose security groups gate the tools) is the acting
    user: ``acting_user_id`` at admission, else the user who admitted ``exchange_id``. Never
    silently the owner when someone else wrote the message (docs/access-model.md). A job acts
    for its owner.
    """
    job = job_of(session)
    if job is not None:
        return _job_env(session, job, exchange_id=exchange_id, hooks=hooks)
    agent = AgentRowCatalog().get(session.agent)
    user_id = acting_user_id if acting_user_id is not None else admitted_by(session, exchange_id)
    scope = TurnScope(
        session_id=session.pk, exchange_id=exchange_id, principal=f"user:{user_id}",
        user_id=user_id, agent=agent.name, workspace=workspace_for(session.pk), source=session.source,
        extras=SessionExtras(session), exec_allowlist=deployment_exec_allowlist(),
    )
    return _root_env(agent, scope, provider_for(agent), available_tools().subset(agent.tools), hooks)


def available_tools() -> ToolRegistry:
    """What every frame's tools are taken from: the built-in tools and each active tool of each
    enabled MCP server (``mcp__{server}__{tool}``, read from the database). An agent's catalog
    entry names the MCP tools it gets (:mod:`skald.loop_adapters.catalog`); a child frame takes
    its parent's, through :func:`loop.delegation.frame_env`, like any tool."""
    dynamic = mcp_tools()
    if not dynamic:
        return plugins.sockets.tools
    builtin = plugins.sockets.tools
    return ToolRegistry([*(tool for name in builtin.names() if (tool := builtin.get(name)) is not None), *dynamic])


JOB_SOURCES = ("task", "cron")  # the sources skald.jobs gives the conversations it creates


def job_of(session: Session) -> ScheduledJob | None:
    """The job whose run ``session`` is: an async task's child conversation or a cron firing's."""
    if session.source not in JOB_SOURCES:  # a person's conversation: no lookup on every turn
        return None
    run = JobRun.objects.select_related("job").filter(session_id=session.pk).first()
    if run is not None:
        return run.job
    return ScheduledJob.objects.filter(child_session_id=session.pk).first()


def job_grant(job: ScheduledJob) -> FrameGrant:
    """What a job's frame was granted, as its creator recorded it on the job at spawn."""
    return FrameGrant.recorded({"tools": job.tools, "exec_allowlist": job.exec_allowlist})


def _job_env(session: Session, job: ScheduledJob, *, exchange_id: int, hooks: LoopHooks | None) -> LoopEnv:
    agent = AgentRowCatalog().get(job.agent)
    scope = TurnScope(
        session_id=session.pk, exchange_id=exchange_id, principal=f"user:{job.owner_id}", user_id=job.owner_id,
        agent=str(job.scope_extras.get("gate_agent") or agent.name),
        workspace=workspace_for(job.parent_session_id or session.pk), source=job.source,
        extras={k: v for k, v in job.scope_extras.items() if k in ("case_id", "run_id")},
        exec_allowlist=deployment_exec_allowlist(),
    )
    provider = provider_for(agent, str(job.selection.get("client") or job.client or ""))
    owner_root = _root_env(agent, scope, provider, available_tools(), hooks)
    bounds = deployment_bounds().override(agent.bounds)
    if job.budget_tokens is not None:  # an async task spends what it reserved from its root at spawn
        bounds = bounds.override({"budget_tokens": job.budget_tokens})
    env = frame_env(owner_root, job_grant(job), agent=agent, provider=provider, bounds=bounds, narrative="")
    # A job's frame is its conversation's root: what it is offered is recorded as a root's is (a
    # cron job's tools may never have been offered anywhere else).
    return replace(env, discovery=owner_root.discovery)


def _root_env(agent: AgentSpec, scope: TurnScope, provider: LlmProvider, tools: ToolRegistry,
              hooks: LoopHooks | None) -> LoopEnv:
    return LoopEnv(
        store=kernel_store(), provider=provider, tools=tools, gate=default_gate(), agent=agent, scope=scope,
        bus=ChannelsBus(), bounds=deployment_bounds().override(agent.bounds), hooks=hooks or audited_hooks(),
        discovery=KnownToolRecorder(), calls_canceled=plugins.notify_calls_cancelled,
        detector=plugins.tripwire_detector(), compaction=deployment_compaction(), frame_agents=CatalogFrameAgents(),
    )
