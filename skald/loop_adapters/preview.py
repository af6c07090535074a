"""Write previews (SPEC A4): a unified diff of the current content against the proposed one, read
through the same workspace resolution the file tools use — never the server's working directory."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from typing import Any

from loop.errors import HarnessError, ToolError
from loop.ports import TurnScope
from skald.mcp.definitions import split_offered
from skald.mcp.facts import tool_facts
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


DELEGATES = ("execute_task", "execute_subtask")


def delegation_preview(tool: str, arguments: Mapping[str, Any], scope: TurnScope) -> str:
    """What a human approves for a delegate: the agent, the task, the mode and the tools the child
    would get (the parent's ∩ the agent's ∩ the requested: capability subtraction)."""
    from loop.delegation import child_tool_names
    from skald import plugins
    from skald.loop_adapters.catalog import AgentRowCatalog

    catalog = AgentRowCatalog()
    try:
        parent = catalog.get(scope.agent)
        child = catalog.get(str(arguments.get("agent"))) if tool == "execute_task" else parent
    except HarnessError as exc:  # an unknown agent is refused when the call runs; say so here too
        return f"Delegation: {exc}"
    parent_tools = [name for name in plugins.sockets.tools.names() if name in set(parent.tools)]
    requested = arguments.get("tools") if tool == "execute_subtask" else None
    tools = child_tool_names(parent_tools, child.tools, list(requested) if isinstance(requested, list) else None)
    return (f"Delegation ({tool})\nAgent: {child.name} ({child.kind}, strength {child.strength})\n"
            f"Mode: {arguments.get('mode') or 'sync'}\nTask: {arguments.get('task', '')}\n"
            f"Child's tools: {', '.join(tools) or '(none)'}\n")


def exec_preview(tool: str, arguments: Mapping[str, Any], scope: TurnScope) -> str:
    """What confines the command a human approves (the argv is on the card already)."""
    from skald.loop_adapters.sandbox import sandbox_facts

    facts = sandbox_facts()
    if facts["sandbox"] == "unavailable":
        refused = " (refused on this deployment)" if facts["refused"] else ""
        return f"Sandbox: none{refused}: the command runs with the server's user and sees what it sees\n"
    limits = facts["limits"]
    return (f"Sandbox: {facts['sandbox']}; sees {facts['sees']}; network "
            f"{'allowed' if facts['network'] else 'none'}\nLimits: {limits['cpu_seconds']} s CPU, "
            f"{limits['memory_mb']} MiB memory, {limits['file_mb']} MiB per file, "
            f"{limits['processes']} processes{'' if facts['private_count'] else ' (shared by all commands)'}\n")


def mcp_preview(tool: str, arguments: Mapping[str, Any], scope: TurnScope) -> str:
    """An MCP call's card: the server and its trust, the tool, its pinned annotations, the arguments."""
    facts = tool_facts(tool).get("mcp", {})
    hints = ", ".join(f"{key}={str(value).lower()}" for key, value in sorted(facts.items())
                      if key.endswith("Hint")) or "none stated"
    shown = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True, indent=2)[:4000]
    return (f"MCP server: {facts.get('server', '?')} ({facts.get('trust', 'unknown trust')})\n"
            f"Tool: {tool.split('__', 2)[-1]}\nAnnotations: {hints}\nArguments:\n{shown}\n")


def preview_for(tool: str, arguments: Mapping[str, Any], scope: TurnScope) -> str:
    """The approval card's preview: a diff for a write, the child's capabilities for a delegate,
    the confinement for a command."""
    if tool in DELEGATES:
        return delegation_preview(tool, arguments, scope)
    if tool == "execute_cmd":
        return exec_preview(tool, arguments, scope)
    if split_offered(tool) is not None:
        return mcp_preview(tool, arguments, scope)
    return write_preview(tool, arguments, scope)
