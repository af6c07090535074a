"""A deny-all gate: the fail-closed reference the kernel's tests run against."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loop.ports import GateCall, GateVerdict, TurnScope


class DenyAllGate:
    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        return GateVerdict("deny", "every call is denied by this gate")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        raise AssertionError("a deny-all gate never parks a call")
