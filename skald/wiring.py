"""Composition: plug the features and the built-in tools into the product core's sockets.

Called once from `SkaldConfig.ready()`. This is the only place that knows both the product core
and the features; neither imports the other (the floors in docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from approvals import metrics as approval_metrics
from approvals.gate import ApprovalGate
from approvals.known_tools import known_tools_record
from approvals.pending.services import approvals_cancel_for_calls
from approvals.tripwires.selectors import tripwire_rule_set
from loop.ports import Gate
from loop.providers.base import ToolSpec
from proposals.services import capture_proposals_on_resolve
from skald import metrics, workers
from skald.identity import receivers as identity_receivers
from skald.loop_adapters.preview import preview_for
from skald.mcp import metrics as mcp_metrics
from skald.models import Run
from skald.notifications import metrics as notify_metrics
from skald.plugins import sockets
from skald.tools.catalog import BUILTIN_TOOLS

_installed = False


def _approval_gate() -> Gate:
    return ApprovalGate(previewer=preview_for)


def _capture(run: Run) -> None:
    capture_proposals_on_resolve(run=run)


def _cancel_approvals(tool_call_ids: Sequence[int], principal: str) -> None:
    approvals_cancel_for_calls(tool_call_ids=tool_call_ids, actor_label=principal)


def _record_known(specs: Sequence[ToolSpec]) -> None:
    known_tools_record(specs=specs)


def install() -> None:
    """Fill the sockets (idempotent: Django may call ready() more than once in tests)."""
    global _installed
    if _installed:
        return
    sockets.gate_factory = _approval_gate
    sockets.tools = BUILTIN_TOOLS
    sockets.run_resolved.append(_capture)
    sockets.calls_cancelled.append(_cancel_approvals)
    sockets.tools_offered.append(_record_known)
    sockets.tripwire_rules = tripwire_rule_set
    metrics.register_collector(approval_metrics.collect)
    metrics.register_collector(mcp_metrics.collect)
    metrics.register_collector(notify_metrics.collect)
    identity_receivers.connect()  # sign-in audit and revocation (skald/identity)
    workers.connect()  # task starts recorded for readiness's progress check (skald/workers)
    _installed = True
