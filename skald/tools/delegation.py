"""The delegation tools (SPEC S1-S5): ``execute_task``, ``execute_subtask``, ``list_agents`` and the
``cron`` interface tool. Their schemas are stable (models are prompted with them) and documented in
``docs/delegation.md`` and the OpenAPI tool list.

A sync delegate runs a child frame through the kernel (:mod:`loop.delegation`); an async one
writes a durable job (:mod:`skald.jobs`) and returns its receipt at once. Both choose the child's
model afresh (:mod:`skald.loop_adapters.selection`) and give it at most the parent's tools.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from loop import tracing
from loop.delegation import ChildRequest, DelegateReturn, FrameGrant, child_tool_names, frame_link, run_child
from loop.errors import HarnessError, ToolError
from loop.frame_link import FrameLink
from loop.ports import AgentSpec, ToolContext
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool
from skald.core.errors import SkaldError
from skald.jobs.cron import cron_job_create
from skald.jobs.models import JobKind, JobStatus, ScheduledJob
from skald.jobs.services import job_cancel, job_submit_task
from skald.loop_adapters.catalog import AgentRowCatalog
from skald.loop_adapters.runtime import deployment_bounds, provider_for
from skald.loop_adapters.selection import select_model
from skald.models import AgentKind
from skald.tools.delegation_schemas import (
    CRON_SCHEMA,
    EXECUTE_SUBTASK_SCHEMA,
    EXECUTE_TASK_SCHEMA,
    LIST_AGENTS_SCHEMA,
)


def _task_agent(name: str) -> AgentSpec:
    try:
        agent = AgentRowCatalog().get(name)
    except HarnessError:
        raise ToolError(f"no enabled agent named {name!r}; call list_agents", code="agent_unknown") from None
    if agent.kind != AgentKind.TASK:
        raise ToolError(f"{name!r} is not a task agent; call list_agents", code="agent_not_task")
    return agent


def _trace_link() -> dict[str, str]:
    """The spawning call's span (this thread's current one), which the task's trace links to."""
    traceparent = tracing.tracer.traceparent() if tracing.enabled else ""
    return {"traceparent": traceparent} if traceparent else {}


def _delegate(agent: AgentSpec, task: str, requested: list[str] | None, mode: str, client: str,
              context: ToolContext) -> str | DelegateReturn:
    link = frame_link(context)
    tools = child_tool_names(link.tools, agent.tools, requested)
    selection = select_model(agent, client)
    if mode == "async":  # the grant is recorded on the job once, here, and read back on every run and resume
        grant = FrameGrant.at_spawn(link.env, tools=tools, asked_exec=agent.exec_allowlist)
        # One budget for the tree: the task reserves its own bound from what the root has left.
        budget = link.authority.reserve(deployment_bounds().override(agent.bounds).budget_tokens)
        if budget == 0:
            raise ToolError("no budget is left in this run for an async task", code="budget_exhausted")
        scope = context.scope
        assert scope.user_id is not None
        job = job_submit_task(
            owner_id=scope.user_id, source=scope.source, parent_session_id=scope.session_id,
            parent_exchange_id=link.exchange_id, parent_call_id=context.call_id or None, agent=agent.name,
            task=task, tools=grant.tools, exec_allowlist=grant.exec_allowlist, budget_tokens=budget,
            client=selection.client,
            selection=selection.as_dict(),
            scope_extras={**dict(scope.extras), "gate_agent": scope.agent, **_trace_link()},
        )
        return (f"Started async task #{job.pk} ({agent.name}). Its result will arrive later in this "
                f"conversation as a task_completed call; do not wait for it.")
    provider = provider_for(agent, selection.client)
    return run_child(link, ChildRequest(agent=agent, task=task, tools=tools, provider=provider,
                                        selection=selection.as_dict(),
                                        bounds=deployment_bounds().override(agent.bounds)), context)


@dataclass(frozen=True)
class DelegateTool:
    """``execute_task`` or ``execute_subtask``. Sync delegates are concurrency-safe: a round of
    several runs them in parallel (bounded by ``max_parallel_calls``) and records in call order."""

    name: str
    description: str
    parameters: Mapping[str, Any] = field(repr=False)
    concurrency_safe: bool = True
    # Re-running a delegate after a crash would start the child's work again.
    restart_hint: str = RestartHint.MARK_INTERRUPTED
    # A child runs a whole loop: it is bounded by its own turns, budget and the stop, not by the
    # per-tool timeout.
    timeout: float | None = None
    trace_kind: ClassVar[str] = "subagent"  # what its execute_tool span says it is (skald.tracing)

    def delegates_to(self, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        """The tools the child may use (injection provenance: a delegation is read-only when all of
        them are, loop/provenance.tool_read_only). Raises ToolError for an unknown agent."""
        agent = _task_agent(str(arguments.get("agent", "")))
        requested = arguments.get("tools")
        if isinstance(requested, list):
            return tuple(name for name in agent.tools if name in requested)
        return tuple(agent.tools)

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str | DelegateReturn:
        mode, task = str(arguments.get("mode") or "sync"), str(arguments["task"])
        if self.name == "execute_task":
            agent = _task_agent(str(arguments["agent"]))
            return _delegate(agent, task, None, mode, str(arguments.get("client") or ""), context)
        requested = arguments.get("tools")
        return _delegate(frame_link(context).agent, task, list(requested) if requested is not None else None, mode,
                         "", context)


def _list_agents(arguments: Mapping[str, Any], context: ToolContext) -> str:
    agents = [{"name": a.name, "description": a.description, "strength": a.strength}
              for a in AgentRowCatalog().task_agents()]
    return json.dumps({"agents": agents}, ensure_ascii=False)


def _cron(arguments: Mapping[str, Any], context: ToolContext) -> str:
    scope, action = context.scope, arguments["action"]
    assert scope.user_id is not None
    try:
        if action == "create":
            # Never more than the creating frame has: its tools and its process grant.
            within = context.frame if isinstance(context.frame, FrameLink) else None
            job = cron_job_create(owner_id=scope.user_id, agent=str(arguments.get("agent", "")),
                                  tools=within.tools if within is not None else None,
                                  creator_exec=scope.exec_allowlist,
                                  task=str(arguments.get("task", "")), expression=str(arguments.get("expression", "")),
                                  source=scope.source, home_session_id=scope.session_id,
                                  principal=scope.principal)
            next_run = job.schedule.next_run.isoformat() if job.schedule and job.schedule.next_run else "?"
            return f"Created cron job #{job.pk} ({job.cron}); next run {next_run}."
        if action == "cancel":
            job_id = int(arguments.get("job") or 0)
            if not ScheduledJob.objects.filter(pk=job_id, kind=JobKind.CRON, owner_id=scope.user_id).exists():
                raise ToolError(f"no cron job #{job_id} of yours", code="job_not_found")
            job_cancel(job_id=job_id, principal=scope.principal)
            return f"Cancelled cron job #{job_id}."
    except SkaldError as exc:
        raise ToolError(exc.message, code=exc.code) from None
    jobs = ScheduledJob.objects.filter(kind=JobKind.CRON, owner_id=scope.user_id, status=JobStatus.SCHEDULED)
    return json.dumps({"cron_jobs": [{"job": j.pk, "cron": j.cron, "agent": j.agent, "task": j.task[:200]}
                                     for j in jobs[:50]]})


EXECUTE_TASK = DelegateTool(
    "execute_task",
    "Run a task agent on a task. sync: a child agent runs with at most your tools and you get its answer; "
    "async: it runs in the background and its result arrives later as a task_completed call.",
    EXECUTE_TASK_SCHEMA,
)
EXECUTE_SUBTASK = DelegateTool(
    "execute_subtask",
    "Run a child of yourself (your own definition) on a sub-task, with the same or fewer tools.",
    EXECUTE_SUBTASK_SCHEMA,
)
LIST_AGENTS = FunctionTool("list_agents", "List the task agents you can delegate to (name, description, strength).",
                           LIST_AGENTS_SCHEMA, _list_agents, concurrency_safe=True)
CRON = FunctionTool("cron", "Create, list or cancel cron jobs that run a task agent on a schedule.", CRON_SCHEMA,
                    _cron, restart_hint=RestartHint.MARK_INTERRUPTED)
DELEGATION_TOOLS = (EXECUTE_TASK, EXECUTE_SUBTASK, LIST_AGENTS, CRON)
