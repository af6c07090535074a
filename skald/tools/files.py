"""``read_file`` / ``write_file``: confined to the session workspace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.errors import ToolError
from loop.ports import ToolContext
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool
from skald.sessions.workspace import MAX_FILE_BYTES, read_current, resolve_in_workspace


def _read(arguments: Mapping[str, Any], context: ToolContext) -> str:
    text = read_current(context.scope.workspace, arguments["path"])
    if text is None:
        raise ToolError(f"{arguments['path']} does not exist", code="file_not_found")
    return text


def _write(arguments: Mapping[str, Any], context: ToolContext) -> str:
    content: str = arguments["content"]
    if len(content.encode("utf-8")) > MAX_FILE_BYTES:
        raise ToolError(f"content is larger than {MAX_FILE_BYTES} bytes", code="file_too_large")
    path = resolve_in_workspace(context.scope.workspace, arguments["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_file():
        raise ToolError(f"{arguments['path']} is not a regular file", code="path_not_file")
    path.write_text(content, encoding="utf-8")
    return f"wrote {len(content.encode('utf-8'))} bytes to {arguments['path']}"


PATH = {"type": "string", "minLength": 1, "maxLength": 512, "description": "Path relative to the workspace."}

READ_FILE = FunctionTool(
    name="read_file",
    description="Read a text file from the session workspace.",
    parameters={"type": "object", "properties": {"path": PATH}, "required": ["path"], "additionalProperties": False},
    fn=_read,
    concurrency_safe=True,
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
)
