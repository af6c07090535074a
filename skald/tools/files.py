"""``read_file`` / ``write_file``: the session workspace (a durable store shared by every worker)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from audit.actors import Actor
from loop.errors import ToolError
from loop.ports import ToolContext
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool
from skald.loop_adapters.store import call_fence
from skald.sessions.effects import refused_when_taken_over
from skald.sessions.workspace import MAX_PATH_CHARS, workspace_read, workspace_write


def _read(arguments: Mapping[str, Any], context: ToolContext) -> str:
    text = workspace_read(session_id=context.scope.session_id, path=arguments["path"])
    if text is None:
        raise ToolError(f"{arguments['path']} does not exist", code="file_not_found")
    return text


def _write(arguments: Mapping[str, Any], context: ToolContext) -> str:
    data, actor = arguments["content"].encode("utf-8"), Actor.parse(context.scope.principal)
    with refused_when_taken_over(session_id=context.scope.session_id, tool="write_file", call_key=context.call_key,
                                 targets=[str(arguments["path"])], actor=actor):
        row = workspace_write(session_id=context.scope.session_id, path=arguments["path"], data=data, actor=actor,
                              fence=call_fence(context))
    return f"wrote {len(data)} bytes to {row.path}"


PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS, "description": "Path relative to the workspace."}

READ_FILE = FunctionTool(
    name="read_file",
    description="Read a text file from the session workspace.",
    parameters={"type": "object", "properties": {"path": PATH}, "required": ["path"], "additionalProperties": False},
    fn=_read,
    concurrency_safe=True,
    reads_path="path",  # a file written in a tainted frame is untrusted when read back (loop/provenance.py)
)

WRITE_FILE = FunctionTool(
    name="write_file",
    description="Write (create or replace) a text file in the session workspace.",
    parameters={
        "type": "object",
        "properties": {"path": PATH, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    },
    fn=_write,
    restart_hint=RestartHint.RERUN,
    writes_path="path",
)
