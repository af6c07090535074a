"""``execute_cmd``: the exec bridge (argv only, operator allow-list, minimal env, killed on cancel)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from loop.ports import ToolContext
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool


def _execute(arguments: Mapping[str, Any], context: ToolContext) -> str:
    from loop.tools.exec_bridge import ExecBridge

    bridge = ExecBridge.from_env(settings.BRAIN_ENGINE_EXEC_ALLOWLIST)
    workspace = context.scope.workspace
    workspace.mkdir(parents=True, exist_ok=True)
    result = bridge.run(list(arguments["argv"]), cancel=context.cancel, timeout=context.timeout, cwd=str(workspace))
    parts = [f"exit code: {result.exit_code}"]
    if result.timed_out:
        parts.append("(timed out)")
    if result.truncated:
        parts.append("(output truncated)")
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
