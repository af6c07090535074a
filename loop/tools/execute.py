"""Run one tool under the loop's execution environment: a thread, a timeout, an output cap.

A tool error, a timeout or a crash becomes a model-visible error result; nothing here raises into
the driver.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connections

from loop.bounds import truncate_output
from loop.cancellation import CancelToken
from loop.errors import HumanNeeded, ToolError
from loop.masking import CredentialTripwire, withhold_credentials
from loop.ports import Tool, ToolContext

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: str  # a ToolCallStatus value: completed | failed | cancelled
    content: str
    is_error: bool
    truncated: bool = False


def execute_tool(
    tool: Tool, arguments: Mapping[str, Any], context: ToolContext, *, output_cap: int
) -> ToolOutcome:
    """Execute ``tool`` with ``context.timeout``; cancel the call's token on timeout."""
    box: dict[str, Any] = {}
    call_token: CancelToken = context.cancel

    def target() -> None:
        try:
            box["value"] = tool.run(arguments, context)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a tool result
            box["error"] = exc
        finally:
            connections.close_all()

    worker = threading.Thread(target=target, name=f"tool:{tool.name}", daemon=True)
    worker.start()
    worker.join(context.timeout)
    if worker.is_alive():
        call_token.cancel("tool timeout")
        worker.join(1.0)
        return ToolOutcome("failed", f"tool error: {tool.name} timed out after {context.timeout:g} s", True)
    if call_token.cancelled:
        return ToolOutcome("cancelled", f"tool call cancelled: {call_token.reason}", True)
    error = box.get("error")
    if isinstance(error, HumanNeeded):
        return ToolOutcome("awaiting_human", error.question[:4000], False)
    if isinstance(error, ToolError):
        return ToolOutcome("failed", f"tool error ({error.code}): {error}", True)
    if isinstance(error, CredentialTripwire):
        return ToolOutcome("failed", f"tool error: {error}", True)
    if error is not None:
        logger.warning("tool %s crashed: %r", tool.name, error)
        return ToolOutcome("failed", f"tool error: {tool.name} failed ({type(error).__name__})", True)
    # A credential in a tool's output never enters history (and so never reaches a provider).
    guarded = withhold_credentials(str(box.get("value", "")), what="tool output")
    text, truncated = truncate_output(guarded, output_cap)
    return ToolOutcome("completed", text, False, truncated)
