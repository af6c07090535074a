"""Each active MCP tool as a kernel :class:`~loop.ports.Tool`, offered as ``mcp__{server}__{tool}``.

The call passes the kernel's fixed pipeline like any tool (intent, look-up, gate, validation,
execution, truncation, tripwires, result). Here only the execution:

- the tool's row is read again (the database is truth): a tool no longer active, or a server
  disabled or deleted, refuses the call with a typed, model-visible ``ToolError``;
- the connection's listing is compared with the pin: a differing definition quarantines the tool
  (:func:`skald.mcp.services.mcp_server_refresh`) and refuses the call;
- ``structuredContent`` (else the content blocks) becomes the result text; ``isError`` is a
  model-visible tool error; a server that cannot be reached is an infrastructure failure;
- a server that dies (or whose transport breaks) while a call is in flight: the call may have taken
  effect. A call safe to repeat (the restart hint ``RERUN``) is made once more on a fresh connection;
  any other ends ``interrupted`` (:class:`~loop.tools.infra.ToolOutcomeUnknown`), which the model
  reads, and the exchange goes on.

Durability (the restart hint): ``RERUN`` only for a tool annotated ``idempotentHint`` or
``readOnlyHint`` on a trusted server; any other call interrupted by a crash ends ``interrupted``
and is never made twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django.conf import settings

from loop.errors import ToolError
from loop.ports import Tool, ToolContext
from loop.tools.hints import RestartHint
from loop.tools.infra import ToolOutcomeUnknown
from skald.mcp import metrics, tools_cache
from skald.mcp.calls import CallResult, Elicit, ElicitAnswer, ElicitRequest, McpCallError, McpUnavailable
from skald.mcp.config import McpConfigError
from skald.mcp.definitions import hints, offered_name

MAX_BLOCKS = 64


@dataclass(frozen=True)
class McpToolProxy:
    name: str
    description: str
    parameters: Mapping[str, Any]
    server: str
    tool: str
    annotations: Mapping[str, Any] = field(default_factory=dict)
    trusted: bool = False
    trace_kind: ClassVar[str] = "mcp"  # what its execute_tool span says it is (skald.tracing)
    # No kernel timeout: the call's own deadline (the frame's tool_timeout bound, in the pool) replaces
    # it, because an elicitation pauses that deadline while a person answers (skald/mcp/client.py).
    timeout: ClassVar[None] = None

    @property
    def concurrency_safe(self) -> bool:
        return self.trusted and hints(self.annotations).get("readOnlyHint", False)

    @property
    def read_only(self) -> bool:
        """``$provenance.read_only`` (loop/provenance.tool_read_only): the pinned ``readOnlyHint``, whatever
        the server's trust. It loosens nothing on its own: the MCP default rules gate every tool of an
        untrusted server unless an operator allows it, having read its pinned definition (a changed
        one is quarantined). For a tool allowed so, a read in a tainted frame runs, as it would in a
        built-in's; once a suspected instruction is in the frame every call needs approval anyway
        (``approvals.rules.seed.PROVENANCE_DEFAULT_RULES``). Measured: docs/provenance.md, AgentDojo."""
        return hints(self.annotations).get("readOnlyHint", False)

    @property
    def restart_hint(self) -> str:
        stated = hints(self.annotations)
        if self.trusted and (stated.get("idempotentHint") or stated.get("readOnlyHint")):
            return RestartHint.RERUN
        return RestartHint.MARK_INTERRUPTED

    def run(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        from skald.mcp.models import McpServer, McpTool, McpToolStatus
        from skald.mcp.sampling import sampler
        from skald.mcp.services import mcp_server_refresh, mcp_server_status_record, pool, server_spec

        row = McpTool.objects.select_related("server").filter(server__name=self.server, name=self.tool).first()
        if row is None or not row.server.enabled:
            raise ToolError(f"{self.name} is no longer available (its server was removed or disabled)",
                            code="mcp_tool_unavailable")
        if row.status != McpToolStatus.ACTIVE:
            raise ToolError(f"{self.name} is {row.status}: an administrator must review it before it can be used",
                            code=f"mcp_tool_{row.status}")
        server: McpServer = row.server
        try:
            spec = server_spec(server)
            listing = {d.name: d for d in pool().listing(spec)}
        except McpUnavailable as exc:
            mcp_server_status_record(server=server, error=exc.detail)
            raise
        except McpConfigError as exc:  # the allowlist shrank, a secret file went, the screen now refuses
            mcp_server_status_record(server=server, error=exc.message)
            raise ToolError(f"{self.name}: {exc.message}", code=exc.code) from None
        listed = listing.get(self.tool)
        if listed is None or listed.digest != row.digest:
            mcp_server_refresh(server=server, listing=tuple(listing.values()))
            state = "gone" if listed is None else "quarantined"
            raise ToolError(f"{self.name} changed on its server and is {state} until an administrator reviews it",
                            code=f"mcp_tool_{state}")
        if server.status != "connected":
            mcp_server_status_record(server=server, error="")
        timeout = call_timeout(context)
        started = time.monotonic()
        try:
            try:
                result = pool().call(spec, self.tool, arguments, cancel=context.cancel, timeout=timeout,
                                     on_progress=self._reporter(context), elicit=self._elicitor(context),
                                     sample=sampler(server=self.server, allowed=server.allow_sampling,
                                                    tool=self.name, context=context))
            except McpUnavailable as exc:
                mcp_server_status_record(server=server, error=exc.detail)
                if self.restart_hint != RestartHint.RERUN:
                    raise ToolOutcomeUnknown(f"MCP server {self.server!r} ended while the call was in flight "
                                             f"({exc.detail})") from exc
                # Safe to repeat: once more, on the connection the pool opens afresh (a second failure is
                # the infrastructure's).
                result = pool().call(spec, self.tool, arguments, cancel=context.cancel, timeout=timeout,
                                     on_progress=self._reporter(context), elicit=self._elicitor(context),
                                     sample=sampler(server=self.server, allowed=server.allow_sampling,
                                                    tool=self.name, context=context))
                mcp_server_status_record(server=server, error="")
        except McpUnavailable as exc:
            mcp_server_status_record(server=server, error=exc.detail)
            raise
        except McpCallError as exc:
            raise ToolError(f"{self.name}: the server refused the call: {exc}", code="mcp_error") from None
        except TimeoutError as exc:
            raise ToolError(str(exc), code="mcp_timeout") from None
        finally:
            metrics.observe(self.server, time.monotonic() - started)
        text = result_text(result)
        if result.is_error:
            raise ToolError(text or "the tool reported an error", code="mcp_tool_error")
        return text

    def _elicitor(self, context: ToolContext) -> Elicit:
        """A server's ``elicitation/create`` during this call: a card for the session's owner, awaited
        on the pool's event loop (:mod:`skald.mcp.elicitation`)."""
        from skald.mcp.elicitation import elicit

        async def ask(request: ElicitRequest) -> ElicitAnswer:
            return await elicit(server=self.server, tool=self.name, scope=context.scope, call_id=context.call_id,
                                request=request)

        return ask

    def _reporter(self, context: ToolContext) -> Callable[[float, float | None, str | None], None]:
        """``notifications/progress`` → a live ``tool.progress`` delta to the session's viewers (the
        console's status line; never durable). A call inside an async task also tells the task's
        parent conversation (``task.progress``: its task strip), looked up at the first report."""
        from skald.loop_adapters.bus import ChannelsBus

        bus, scope = ChannelsBus(), context.scope
        task: list[tuple[int, int] | None] = []

        def report(progress: float, total: float | None, message: str | None) -> None:
            said = {"tool": self.name, "progress": progress, "total": total, "message": (message or "")[:200]}
            bus.delta(scope.session_id, {"type": "tool.progress", "exchange": scope.exchange_id,
                                         "call": context.call_id, **said})
            if not task:
                task.append(task_of(scope.session_id))
            if task[0] is not None:
                job, parent = task[0]
                bus.delta(parent, {"type": "task.progress", "job": job, **said})

        return report


def task_of(session_id: int) -> tuple[int, int] | None:
    """``(job id, parent session id)`` when ``session_id`` is an async task's own conversation.
    Called on a helper thread of the pool's: its database connection is closed after (a caller
    inside a transaction keeps its own)."""
    from django.db import connection

    from skald.jobs.models import JobKind, ScheduledJob

    try:
        row = (ScheduledJob.objects.filter(child_session_id=session_id, kind=JobKind.TASK)
               .values_list("pk", "parent_session_id").first())
    finally:
        if not connection.in_atomic_block:
            connection.close()
    return (row[0], row[1]) if row is not None and row[1] is not None else None


def call_timeout(context: ToolContext) -> float:
    """The call's deadline: the calling frame's ``tool_timeout`` bound (the kernel's own timeout for
    any other tool), else ``SKALD_MCP_CALL_TIMEOUT_SECONDS``."""
    bounds = getattr(getattr(context.frame, "env", None), "bounds", None)
    bound = getattr(bounds, "tool_timeout", None) or context.timeout
    return float(bound or settings.SKALD_MCP_CALL_TIMEOUT_SECONDS)


def result_text(result: CallResult) -> str:
    """What the model reads: ``structuredContent`` as JSON when present, else the content blocks
    (text as is; any other block as its JSON, binary data elided)."""
    if result.structured is not None:
        return json.dumps(result.structured, ensure_ascii=False, sort_keys=True)
    parts: list[str] = []
    for block in result.content[:MAX_BLOCKS]:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            shown = {k: (f"<{len(v)} bytes elided>" if k in ("data", "blob") and isinstance(v, str) else v)
                     for k, v in block.items()}
            parts.append(json.dumps(shown, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


def mcp_tools() -> Sequence[Tool]:
    """Every tool an enabled server offers now, as kernel tools (agents take their subset by name)."""
    return [McpToolProxy(name=offered_name(o.server, o.tool), description=o.description[:1024] or o.tool,
                         parameters=o.input_schema or {"type": "object", "properties": {}}, server=o.server,
                         tool=o.tool, annotations=o.annotations, trusted=o.trusted)
            for o in tools_cache.offers()]


def mcp_tool_names_for(agent: str) -> tuple[str, ...]:
    """The offered names of the tools ``agent`` gets (servers that list it, or ``*``)."""
    return tuple(offered_name(o.server, o.tool) for o in tools_cache.offers() if o.serves(agent))
