"""One tool round (SPEC L9, L10): the fixed pipeline per call, and parallel fan-out.

Per call: journal ``control:tool_intent`` → look up (unknown = loud refusal) → gate → validate →
execute → truncate → record ``tool_result`` + ``control:tool_done``. A round whose calls are all
``concurrency_safe`` runs concurrently (:func:`runs_concurrently`), bounded by
``max_parallel_calls``: prepared in call order → concurrent execution → recorded in call order. A
mixed round runs sequentially.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from loop import injection, provenance, tracing
from loop.bounds import Bounds
from loop.cancellation import CancelToken
from loop.errors import ToolError
from loop.events import EventKind
from loop.failpoints import failpoint
from loop.models import ToolCall, ToolCallStatus
from loop.parking import ParkEntry
from loop.ports import CallingFrame, Gate, GateCall, GateVerdict, Tool, ToolContext, TurnScope
from loop.store import ParsedCall, Store
from loop.tools.execute import ToolOutcome, execute_tool
from loop.tools.registry import ToolRegistry
from loop.tools.validate import validate_arguments
from loop.tripwires import Detector


@dataclass
class RoundResult:
    parked: list[tuple[ToolCall, GateCall, GateVerdict]] = field(default_factory=list)
    handoffs: list[tuple[ToolCall, str]] = field(default_factory=list)
    # Calls a child frame parked below one of this round's delegates; the delegate's own call stays
    # running until its child resumes and ends.
    nested: list[ParkEntry] = field(default_factory=list)
    canceled: bool = False
    executed: int = 0


@dataclass(frozen=True)
class RoundEnv:
    store: Store
    tools: ToolRegistry
    gate: Gate
    scope: TurnScope
    bounds: Bounds
    principal: str
    narrative: str = ""
    detector: Detector | None = None  # credential tripwires for tool output; the vendored set when None
    link: CallingFrame | None = None  # the calling frame (a loop.frame_link.FrameLink), handed to delegates


_OFF = tracing.NOOP.start("", {})  # the span a call has when tracing is off


def gate_call(call: ToolCall, provenance: Mapping[str, Any] | None = None) -> GateCall:
    return GateCall(call_id=call.pk, key=call.call_key, tool=call.tool, arguments=call.arguments,
                    arguments_hash=call.arguments_hash, provenance=provenance)


def call_provenance(env: RoundEnv, call: ToolCall, tool: Tool) -> Mapping[str, Any] | None:
    """The call's provenance (loop/provenance.py), computed from stored rows and, in a tainted frame,
    journaled as ``control:provenance`` before the gate sees it. A row stored for this call already
    (a retry after a crash) is the answer: what the gate saw the first time."""
    rows = env.store.calls.provenance_rows(call.session_id)
    for row in rows:
        if row.kind == EventKind.PROVENANCE and row.payload.get("key") == call.call_key \
                and row.narrative == env.narrative:
            return {**{k: v for k, v in row.payload.items() if k != "key"}, "seq": row.seq}
    found = provenance.compute(rows, narrative=env.narrative, arguments=call.arguments,
                               read_only=provenance.tool_read_only(tool, call.arguments, env.tools.get))
    if not found.tainted:
        return None
    stored = found.as_dict()
    writes = getattr(tool, "writes_path", None)
    if writes and isinstance(call.arguments.get(writes), str):
        stored["writes"] = call.arguments[writes]
    seq = env.store.calls.record_provenance(call, stored, narrative=env.narrative)
    return {**stored, "seq": seq}


def result_label(env: RoundEnv, call: ToolCall, outcome: ToolOutcome) -> tuple[str, str, list[dict[str, Any]]]:
    """An executed call's result label, its reason and the suspected instructions found in it."""
    tool = env.tools.get(call.tool)
    trust, reason = provenance.tool_trust(tool), ""
    if trust == provenance.UNTRUSTED:
        reason = f"{call.tool} is declared untrusted"
    reads = getattr(tool, "reads_path", None)
    if trust == provenance.TRUSTED and reads and isinstance(call.arguments.get(reads), str):
        written = provenance.path_tainted(env.store.calls.provenance_rows(call.session_id), call.arguments[reads])
        if written is not None:
            trust, reason = provenance.UNTRUSTED, f"written in a tainted frame (provenance row {written})"
    if outcome.subagent is not None and outcome.subagent.get("trust") == provenance.UNTRUSTED:
        trust, reason = provenance.UNTRUSTED, "the sub-agent's frame was tainted"
    if trust != provenance.UNTRUSTED or outcome.is_error:
        return trust, reason, []
    found = injection.scan(outcome.content, tool_names=env.tools.names())
    return trust, reason, [finding.as_dict() for finding in found]


def _settle(env: RoundEnv, call: ToolCall, outcome: ToolOutcome, result: RoundResult,
            span: tracing.Span = _OFF) -> None:
    """Record an executed call's outcome, or set it aside as a handoff to a human."""
    if outcome.status == ToolCallStatus.AWAITING_HUMAN:
        if outcome.nested:
            result.nested.extend(outcome.nested)
        else:
            result.handoffs.append((call, outcome.content))
        if tracing.enabled:  # the call's span ends where the call starts waiting for a human
            span.set({"skald.tool.outcome": ToolCallStatus.AWAITING_HUMAN})
            span.end()
        return
    _record(env, call, outcome, span)
    result.executed += 1


def _record(env: RoundEnv, call: ToolCall, outcome: ToolOutcome, span: tracing.Span = _OFF) -> None:
    trust, reason, suspects = result_label(env, call, outcome) if outcome.status == ToolCallStatus.COMPLETED \
        else (provenance.TRUSTED, "", [])
    env.store.calls.record_result(call, status=outcome.status, content=outcome.content, is_error=outcome.is_error,
                                  truncated=outcome.truncated, principal=env.principal, narrative=env.narrative,
                                  withheld=outcome.withheld, subagent=outcome.subagent, trust=trust,
                                  trust_reason=reason, suspects=suspects)
    if tracing.enabled:
        span.set({"skald.tool.outcome": outcome.status})
        if outcome.withheld:
            span.set({"skald.tool.withheld": outcome.withheld})
        if outcome.is_error:
            span.fail(outcome.status)
        span.content("gen_ai.tool.call.result", outcome.content)
        span.end()
    failpoint("loop.after_tool_result")


def _tool_span(env: RoundEnv, call: ToolCall, parsed: ParsedCall) -> tracing.Span:
    """``execute_tool {tool}`` (GenAI semconv) with Skald's kind of tool and, for MCP, its server."""
    tool = env.tools.get(call.tool)
    kind = str(getattr(tool, "trace_kind", "builtin")) if tool is not None else "unknown"
    attributes: dict[str, str | int] = {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.tool, "gen_ai.tool.call.id": call.call_key,
        "gen_ai.tool.type": "extension" if kind == "mcp" else "function", "skald.tool.kind": kind,
        "skald.tool_call.id": call.pk}
    server = getattr(tool, "server", None)
    if kind == "mcp" and server:
        attributes["skald.mcp.server"] = str(server)
    span = tracing.tracer.start(f"execute_tool {call.tool}", attributes)
    span.content("gen_ai.tool.call.arguments", parsed.raw_arguments)
    return span


def runs_concurrently(tools: Sequence[Tool | None]) -> bool:
    """The concurrency-safety rule: a round's calls run concurrently only when there are several
    and every one is a known ``concurrency_safe`` tool; any other round runs them one by one."""
    return len(tools) > 1 and all(tool is not None and tool.concurrency_safe for tool in tools)


def journal_upfront(tools: ToolRegistry, names: Sequence[str]) -> int:
    """How many of a round's calls may journal their intent with the message end: all of a
    concurrent round (it journals them all before anything runs), else the first one."""
    found = [tools.get(name) for name in names]
    if runs_concurrently(found):
        return len(found)
    return 1 if found else 0


def _prepare(
    env: RoundEnv, call: ToolCall, parsed: ParsedCall, result: RoundResult, *, skip_gate: bool = False,
    span: tracing.Span = _OFF,
) -> Tool | None:
    """Intent, look-up, gate and validation. Returns the tool when the call may execute now."""
    if call.status != ToolCallStatus.RUNNING:  # the first calls were journaled with the message end
        env.store.calls.record_intent(call, principal=env.principal, narrative=env.narrative)
    failpoint("loop.after_intent")
    tool = env.tools.get(call.tool)
    if tool is None:
        _record(env, call, ToolOutcome(ToolCallStatus.FAILED, f"tool error (unknown_tool): no tool named "
                                       f"{call.tool!r} is available to this agent", True), span)
        return None
    if skip_gate:
        if tracing.enabled:
            span.set({"skald.gate.verdict": "approved_by_human"})
    else:
        request = gate_call(call, call_provenance(env, call, tool))
        verdict = env.gate.check(request, env.scope)
        if tracing.enabled:
            span.set(_verdict_attributes(verdict))
        if verdict.action == "deny":
            reason = verdict.reason or "no rule allows it"
            _record(env, call, ToolOutcome(ToolCallStatus.REJECTED, f"denied by the approval gate: {reason}", True),
                    span)
            return None
        if verdict.action == "require":
            if tracing.enabled:  # the span ends at the park; the decision's span links to it
                verdict = replace(verdict, detail={**verdict.detail, "traceparent": span.traceparent()})
                span.set({"skald.tool.outcome": ToolCallStatus.AWAITING_HUMAN})
                span.end()
            result.parked.append((call, request, verdict))
            return None
    try:
        validate_arguments(tool.parameters, parsed.arguments)
    except ToolError as exc:
        _record(env, call, ToolOutcome(ToolCallStatus.FAILED, f"tool error ({exc.code}): {exc}", True), span)
        return None
    return tool


def _verdict_attributes(verdict: GateVerdict) -> dict[str, str | int]:
    attributes: dict[str, str | int] = {"skald.gate.verdict": verdict.action}
    if verdict.rule_id is not None:
        attributes["skald.gate.rule"] = verdict.rule_id
    return attributes


def _execute(env: RoundEnv, call: ToolCall, tool: Tool, arguments: Mapping[str, Any], cancel: CancelToken,
             span: tracing.Span = _OFF) -> ToolOutcome:
    # A tool may declare its own timeout (None: none at all, as a delegate does).
    timeout = getattr(tool, "timeout", env.bounds.tool_timeout)
    context = ToolContext(scope=env.scope, call_key=call.call_key, cancel=cancel.child(), timeout=timeout,
                          call_id=call.pk, frame=env.link, fence=env.store.journal.fence)
    if not tracing.enabled:
        return execute_tool(tool, arguments, context, output_cap=env.bounds.tool_output_cap, detector=env.detector)
    restore = tracing.tracer.current(span)  # a child frame, the provider and MCP requests nest under the call
    try:
        return execute_tool(tool, arguments, context, output_cap=env.bounds.tool_output_cap, detector=env.detector)
    finally:
        restore()


def _cancel_rest(env: RoundEnv, calls: Sequence[tuple[ToolCall, ParsedCall]], reason: str) -> None:
    env.store.calls.cancel_calls([call for call, _parsed in calls], reason=reason, principal=env.principal,
                                 narrative=env.narrative)


def run_round(
    env: RoundEnv,
    calls: Sequence[tuple[ToolCall, ParsedCall]],
    cancel: CancelToken,
    *,
    skip_gate_for: frozenset[int] = frozenset(),
) -> RoundResult:
    """Run a round's calls through the pipeline, in call order; a stop seen before a call cancels
    it and the rest. A sequential round executes each call as soon as it is prepared; a concurrent
    one (:func:`runs_concurrently`) prepares them all, executes them together (at most
    ``max_parallel_calls`` at once) and records them in call order."""
    result = RoundResult()
    concurrent = runs_concurrently([env.tools.get(call.tool) for call, _ in calls])
    ready: list[tuple[ToolCall, Tool, Mapping[str, Any], tracing.Span]] = []
    for position, (call, parsed) in enumerate(calls):
        if cancel.cancelled:  # checked before each tool call
            _cancel_rest(env, calls[position:], cancel.reason)
            result.canceled = True
            return result
        span = _tool_span(env, call, parsed) if tracing.enabled else _OFF
        tool = _prepare(env, call, parsed, result, skip_gate=call.pk in skip_gate_for, span=span)
        if tool is None:
            continue
        if concurrent:
            ready.append((call, tool, parsed.arguments or {}, span))
        else:
            _settle(env, call, _execute(env, call, tool, parsed.arguments or {}, cancel, span), result, span)
    if ready:

        def execute(item: tuple[ToolCall, Tool, Mapping[str, Any], tracing.Span]) -> ToolOutcome:
            call, tool, arguments, span = item
            return _execute(env, call, tool, arguments, cancel, span)

        with ThreadPoolExecutor(max_workers=max(1, env.bounds.max_parallel_calls),
                                thread_name_prefix="fanout") as pool:
            outcomes = list(pool.map(execute, ready))
        for (call, _tool, _arguments, span), outcome in zip(ready, outcomes, strict=True):
            _settle(env, call, outcome, result, span)
    result.canceled = cancel.cancelled
    return result
