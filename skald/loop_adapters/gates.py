"""Interim gates: an allow-list gate (the default until the approval engine is wired) and a
deny-all gate for tests. A call with no scope is always denied."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from loop.ports import GateCall, GateVerdict, TurnScope


class AllowListGate:
    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = frozenset(allowed)

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        if scope is None:
            return GateVerdict("deny", "no scope")
        if call.tool in self.allowed:
            return GateVerdict("allow", "allow-listed")
        return GateVerdict("deny", f"{call.tool} is not allow-listed")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        raise NotImplementedError("the allow-list gate never requires approval")


class DenyAllGate(AllowListGate):
    def __init__(self) -> None:
        super().__init__(())
