"""Run one tool under the loop's execution environment: a (pooled) thread, a timeout, an output cap.

Running (:func:`run_tool`: the thread, the timeout, the token) is kept apart from classifying what
the run left (:func:`classify_run`, pure). A tool error, a timeout or a crash becomes a
model-visible error result. The one exception is an infrastructure failure (:mod:`loop.tools.infra`:
the database, not the tool): it raises :class:`~loop.errors.InfrastructureError` into the driver,
which breaks the exchange.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from loop.bounds import truncate_output
from loop.cancellation import CancelToken
from loop.errors import HumanNeeded, InfrastructureError, ToolError
from loop.failpoints import failpoint
from loop.masking import CredentialTripwire
from loop.models import ToolCallStatus
from loop.parking import ParkEntry
from loop.ports import DelegateReturn, Tool, ToolContext
from loop.sql import release_thread
from loop.tools import threads
from loop.tools.infra import ToolOutcomeUnknown, is_infrastructure_error
from loop.tripwires import Detector
from loop.tripwires.guard import find_tripwires, withheld_notice

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: str  # a ToolCallStatus value: completed | failed | canceled | awaiting_human
    content: str
    is_error: bool
    truncated: bool = False
    withheld: tuple[str, ...] = ()  # credential kinds that kept the output out of history
    subagent: Mapping[str, Any] | None = None  # a delegate's subagent_result, recorded with the result
    nested: tuple[ParkEntry, ...] = ()  # awaiting_human from a delegate: the calls its child tree parked


def execute_tool(
    tool: Tool, arguments: Mapping[str, Any], context: ToolContext, *, output_cap: int,
    detector: Detector | None = None,
) -> ToolOutcome:
    """Run ``tool`` (:func:`run_tool`, the effect), then classify what it left (:func:`classify_run`).

    Raises:
        InfrastructureError: the tool met a database failure, not one of its own.
    """
    return classify_run(run_tool(tool, arguments, context), output_cap=output_cap, detector=detector)


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What running a tool left: its value or what it raised, or a timeout; and whether the call's
    token was cancelled by the end of the run (its reason, else None)."""

    tool: str
    timeout: float | None
    value: object = None
    error: BaseException | None = None
    timed_out: bool = False
    canceled: str | None = None


def run_tool(tool: Tool, arguments: Mapping[str, Any], context: ToolContext) -> ToolRun:
    """Run ``tool`` on a pooled thread under ``context.timeout``; on a timeout, cancel the call's
    token (the thread is left to finish on its own). Whatever the tool raises is captured."""
    box: dict[str, Any] = {}
    call_token: CancelToken = context.cancel

    def target() -> None:
        try:
            failpoint("loop.inside_tool")
            box["value"] = tool.run(arguments, context)
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a tool result
            box["error"] = exc
        finally:
            release_thread()

    done = threads.start(f"tool:{tool.name}", target)
    if not done.wait(context.timeout):
        call_token.cancel("tool timeout")
        done.wait(1.0)
        return ToolRun(tool.name, context.timeout, timed_out=True)
    return ToolRun(tool.name, context.timeout, value=box.get("value"), error=box.get("error"),
                   canceled=call_token.reason if call_token.cancelled else None)


def classify_run(run: ToolRun, *, output_cap: int, detector: Detector | None = None) -> ToolOutcome:
    """The call's result from what its run left; pure (its only effect is a log line).

    Output carrying a credential (``detector``'s rules, the vendored set when None) is withheld:
    the stored result is a notice naming the kinds, and ``withheld`` lists them for the audit row.

    Raises:
        InfrastructureError: the tool met a database failure, not one of its own.
    """
    if run.timed_out:
        timed_out = f"tool error: {run.tool} timed out after {run.timeout or 0:g} s"
        return ToolOutcome(ToolCallStatus.FAILED, timed_out, True)
    value, error = run.value, run.error
    if isinstance(value, DelegateReturn) and value.status == ToolCallStatus.AWAITING_HUMAN:
        return ToolOutcome(ToolCallStatus.AWAITING_HUMAN, value.content, False, nested=tuple(value.parked))
    if isinstance(value, DelegateReturn):  # a child ran: its result and its one subagent_result, whatever the ending
        kinds = find_tripwires(value.content, detector)
        content = withheld_notice("delegate output", kinds) if kinds else value.content
        text, truncated = truncate_output(content, output_cap)
        return ToolOutcome(value.status, text, value.status != ToolCallStatus.COMPLETED, truncated, tuple(kinds),
                           value.subagent)
    if run.canceled is not None:
        return ToolOutcome(ToolCallStatus.CANCELED, f"tool call canceled: {run.canceled}", True)
    if isinstance(error, ToolOutcomeUnknown):
        return ToolOutcome(ToolCallStatus.INTERRUPTED, f"interrupted: {run.tool}: {error}; the outcome is unknown "
                           "and the call was not retried", True)
    if error is not None and is_infrastructure_error(error):
        logger.error("tool %s hit an infrastructure failure: %r", run.tool, error)
        detail = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise InfrastructureError(f"tool {run.tool}: {type(error).__name__}: {detail}",
                                  code="tool_infrastructure_error") from error
    if isinstance(error, HumanNeeded):
        return ToolOutcome(ToolCallStatus.AWAITING_HUMAN, error.question[:4000], False)
    if isinstance(error, ToolError):
        return ToolOutcome(ToolCallStatus.FAILED, f"tool error ({error.code}): {error}", True)
    if isinstance(error, CredentialTripwire):
        return ToolOutcome(ToolCallStatus.FAILED, f"tool error: {error}", True)
    if error is not None:
        logger.warning("tool %s crashed: %r", run.tool, error)
        return ToolOutcome(ToolCallStatus.FAILED, f"tool error: {run.tool} failed ({type(error).__name__})", True)
    # A credential in a tool's output never enters history (and so never reaches a provider).
    output = str(value)
    kinds = find_tripwires(output, detector)
    if kinds:
        notice = withheld_notice("tool output", kinds)
        return ToolOutcome(ToolCallStatus.COMPLETED, notice, False, withheld=tuple(kinds))
    text, truncated = truncate_output(output, output_cap)
    return ToolOutcome(ToolCallStatus.COMPLETED, text, False, truncated)
