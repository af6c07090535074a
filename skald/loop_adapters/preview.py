"""Write previews (SPEC A4): a unified diff of the current content against the proposed one, read
through the same workspace resolution the file tools use — never the server's working directory."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from loop.errors import ToolError
from loop.ports import TurnScope
from skald.sessions.workspace import read_current

MAX_PREVIEW_LINES = 400


def write_preview(tool: str, arguments: Mapping[str, Any], scope: TurnScope) -> str:
    """The preview a human sees before approving ``tool``; empty when the tool has none."""
    if tool != "write_file":
        return ""
    path, proposed = arguments.get("path"), arguments.get("content")
    if not isinstance(path, str) or not isinstance(proposed, str):
        return "(no preview: the arguments are not a path and a content string)"
    try:
        current = read_current(scope.session_id, path)
    except ToolError as exc:
        return f"(no preview: {exc})"
    header = f"new file: {path}\n" if current is None else ""
    diff = difflib.unified_diff(
        (current or "").splitlines(keepends=True), proposed.splitlines(keepends=True),
        fromfile="/dev/null" if current is None else f"a/{path}", tofile=f"b/{path}",
    )
    lines = list(diff)
    if len(lines) > MAX_PREVIEW_LINES:
        lines = [*lines[:MAX_PREVIEW_LINES], f"\n... {len(lines) - MAX_PREVIEW_LINES} more diff lines\n"]
    return header + "".join(line if line.endswith("\n") else line + "\n" for line in lines)
