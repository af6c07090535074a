"""The loop's bounds (SPEC L2), with the seed's defaults. Overridable per agent and per deployment;
never silently exceeded: every bound ends in an outcome, a visible truncation marker or a refusal."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from loop.errors import HarnessError

DEFAULT_MAX_TURNS = 8
TOOL_OUTPUT_CAP = 16 * 1024
TOOL_TIMEOUT = 30.0
REQUEST_CAP = 1024 * 1024
REPLAY_CAP = 500
PAYLOAD_CAP_BYTES = 64 * 1024
MAX_PARALLEL_CALLS = 4
MAX_AGENT_DEPTH = 5
DEFAULT_LEASE_SECONDS = 30.0  # SKALD_LEASE_SECONDS: how long a claim outlives its last renewal


@dataclass(frozen=True, slots=True)
class Bounds:
    max_turns: int = DEFAULT_MAX_TURNS
    tool_output_cap: int = TOOL_OUTPUT_CAP
    tool_timeout: float = TOOL_TIMEOUT
    request_cap: int = REQUEST_CAP
    replay_cap: int = REPLAY_CAP
    payload_cap: int = PAYLOAD_CAP_BYTES
    max_parallel_calls: int = MAX_PARALLEL_CALLS
    budget_tokens: int | None = None

    def override(self, values: Mapping[str, Any] | None) -> Bounds:
        """A copy with ``values`` applied; unknown keys or non-positive numbers refuse loudly."""
        if not values:
            return self
        known = {f.name: f.type for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise HarnessError(f"unknown bound {key!r}", code="bounds_invalid")
            if value is None and key == "budget_tokens":
                changes[key] = None
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise HarnessError(f"bound {key!r} must be a positive number", code="bounds_invalid")
            changes[key] = float(value) if key == "tool_timeout" else int(value)
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


TRUNCATION_MARKER = "\n[... output truncated by Skald: {dropped} of {total} bytes dropped (cap {cap} bytes) ...]"


def truncate_output(text: str, cap: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``cap`` UTF-8 bytes (marker included), keeping a visible marker."""
    raw = text.encode("utf-8")
    if len(raw) <= cap:
        return text, False
    marker_probe = TRUNCATION_MARKER.format(dropped=len(raw), total=len(raw), cap=cap).encode()
    keep = max(0, cap - len(marker_probe))
    head = raw[:keep].decode("utf-8", errors="ignore")
    dropped = len(raw) - len(head.encode("utf-8"))
    return head + TRUNCATION_MARKER.format(dropped=dropped, total=len(raw), cap=cap), True
