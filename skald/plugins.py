"""The product core's sockets: where features (approvals, proposals) and the composition layer's
tools plug in, so that the product core never imports a floor above it.

`skald.wiring.install` fills them once, from `SkaldConfig.ready()`. Each socket is typed and small;
an empty gate socket fails closed: :func:`gate` refuses loudly rather than run tools ungated.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loop.errors import HarnessError
from loop.ports import Gate
from loop.providers.base import ToolSpec
from loop.tools.registry import ToolRegistry
from loop.tripwires import Detector, OrgPattern, default_detector, organisation_detector

if TYPE_CHECKING:
    from skald.models import Run

GateFactory = Callable[[], Gate]
RunListener = Callable[["Run"], object]
CallsCancelledListener = Callable[[Sequence[int], str], object]
ToolsOfferedListener = Callable[[Sequence[ToolSpec]], object]
TripwireRules = Callable[[], tuple[Sequence[OrgPattern], Sequence[tuple[str, str]]]]


@dataclass
class Sockets:
    """What the composition layer plugs into the product core.

    Attributes:
        gate_factory: builds the approval gate for a turn (approvals).
        tools: the built-in tool registry agents take subsets of (skald.tools).
        run_resolved: called after a run resolves, outside its transaction (proposal capture).
        calls_cancelled: called inside the transaction that cancels waiting calls, with the call
            ids and the acting principal (pending approvals are cancelled with them).
        tools_offered: told of tools offered to a model for the first time in this process
            (known tools, SPEC A5).
        tripwire_rules: the organisation's credential patterns and allow-list entries
            (regex, reason), read for each turn (approvals, SPEC L16).
    """

    gate_factory: GateFactory | None = None
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    run_resolved: list[RunListener] = field(default_factory=list)
    calls_cancelled: list[CallsCancelledListener] = field(default_factory=list)
    tools_offered: list[ToolsOfferedListener] = field(default_factory=list)
    tripwire_rules: TripwireRules | None = None


sockets = Sockets()


def gate() -> Gate:
    """The approval gate for a turn; refuses loudly when nothing was wired (fail closed)."""
    if sockets.gate_factory is None:
        raise HarnessError("no approval gate is wired (skald.wiring.install did not run)", code="gate_missing")
    return sockets.gate_factory()


def tripwire_detector() -> Detector:
    """The credential detector for a turn: the kernel's rules plus the organisation's, when wired.

    Unwired, the kernel's vendored and built-in rules still apply (never no guard at all).
    """
    if sockets.tripwire_rules is None:
        return default_detector()
    patterns, allow = sockets.tripwire_rules()
    return organisation_detector(patterns, allow)


def notify_run_resolved(run: Run) -> None:
    for listener in sockets.run_resolved:
        listener(run)


def notify_calls_cancelled(tool_call_ids: Sequence[int], principal: str) -> None:
    for listener in sockets.calls_cancelled:
        listener(tool_call_ids, principal)


def notify_tools_offered(specs: Sequence[ToolSpec]) -> None:
    for listener in sockets.tools_offered:
        listener(specs)
