"""The session workspace: the only directory the file tools touch (never the server's cwd).

One resolver serves the file tools and the approval diff preview, so a preview shows exactly what
the tool would read.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from loop.errors import ToolError

MAX_FILE_BYTES = 1024 * 1024


def workspace_for(session_id: int) -> Path:
    return Path(settings.SKALD_WORKSPACE_ROOT) / f"session-{session_id}"


def resolve_in_workspace(workspace: Path, relative: str) -> Path:
    """Resolve ``relative`` inside ``workspace``; traversal and symlink escapes refuse."""
    if not isinstance(relative, str) or not relative.strip() or "\x00" in relative:
        raise ToolError("path must be a non-empty relative path", code="path_invalid")
    candidate = Path(relative)
    if candidate.is_absolute():
        raise ToolError("path must be relative to the session workspace", code="path_outside_workspace")
    workspace.mkdir(parents=True, exist_ok=True)
    root = Path(os.path.realpath(workspace))
    # realpath follows every symlink on the way, including the final component if it exists.
    resolved = Path(os.path.realpath(root / candidate))
    if resolved != root and root not in resolved.parents:
        raise ToolError("path escapes the session workspace", code="path_outside_workspace")
    return resolved


def read_current(workspace: Path, relative: str) -> str | None:
    """The current text of a workspace file, or None when it does not exist."""
    path = resolve_in_workspace(workspace, relative)
    if not path.exists():
        return None
    if not path.is_file():
        raise ToolError(f"{relative} is not a regular file", code="path_not_file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ToolError(f"{relative} is larger than {MAX_FILE_BYTES} bytes", code="file_too_large")
    return path.read_text(encoding="utf-8", errors="replace")
