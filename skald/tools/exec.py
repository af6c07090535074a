"""``execute_cmd``: the exec bridge (argv only, operator allow-list, minimal env, killed on cancel)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from audit.actors import Actor
from loop.bounds import TOOL_TIMEOUT
from loop.ports import ToolContext
from loop.tools.exec_bridge import ExecBridge, parse_allowlist
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool
from skald.loop_adapters.sandbox import exec_sandbox
from skald.loop_adapters.store import call_fence
from skald.sessions.workspace import workspace_discard, workspace_materialise, workspace_sync_back


def frame_allowlist(context: ToolContext) -> tuple[str, ...]:
    """The programs this frame may run: the deployment's, narrowed to the frame's process grant
    (a child's is its parent's ∩ its ask, recorded at spawn; SPEC S2). Never more than the
    deployment's."""
    deployment = parse_allowlist(settings.BRAIN_ENGINE_EXEC_ALLOWLIST)
    granted = context.scope.exec_allowlist
    if granted is None:
        return deployment
    return tuple(name for name in deployment if name in set(granted))


def _execute(arguments: Mapping[str, Any], context: ToolContext) -> str:
    """Run in the deployment's sandbox, confined to a local copy of the session's files; what the
    command leaves behind is recorded as compare-and-sets against the files it started from, under
    the driver's fence (a driver taken over meanwhile writes nothing: ``LeaseLost``). The local copy
    is removed however the command ends."""
    bridge = ExecBridge(frame_allowlist(context), sandbox=exec_sandbox())
    bridge.resolve(str(arguments["argv"][0]))  # a refused program touches no disk
    local = workspace_materialise(session_id=context.scope.session_id, root=context.scope.workspace.resolve())
    try:
        result = bridge.run(list(arguments["argv"]), cancel=context.cancel, timeout=context.timeout or TOOL_TIMEOUT,
                            cwd=str(local.root))
        synced = workspace_sync_back(session_id=context.scope.session_id, materialised=local,
                                     actor=Actor.parse(context.scope.principal), fence=call_fence(context),
                                     call_key=context.call_key)
    finally:
        workspace_discard(local)
    parts = [f"exit code: {result.exit_code}"]
    if result.timed_out:
        parts.append("(timed out)")
    if result.truncated:
        parts.append("(output truncated)")
    if synced.changed:
        parts.append("workspace files changed: " + ", ".join(synced.changed[:20]))
    if synced.refused:
        parts.append("workspace changes NOT applied (the stored files changed since the command started): "
                     + ", ".join(synced.refused[:20]))
    parts.append("stdout:\n" + result.stdout)
    if result.stderr:
        parts.append("stderr:\n" + result.stderr)
    return "\n".join(parts)


EXECUTE_CMD = FunctionTool(
    name="execute_cmd",
    description="Run an allow-listed program with an argv array (no shell) in the session workspace.",
    parameters={
        "type": "object",
        "properties": {"argv": {"type": "array", "items": {"type": "string", "maxLength": 4096},
                                "minItems": 1, "maxItems": 64}},
        "required": ["argv"],
        "additionalProperties": False,
    },
    fn=_execute,
    restart_hint=RestartHint.MARK_INTERRUPTED,
)
