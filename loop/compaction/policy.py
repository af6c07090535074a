"""When a compaction is pending and what it covers: pure, over the projected window.

Pressure is counted in tokens (:mod:`loop.compaction.tokens`) over the window the model sees. The
window is split into a *covered prefix* (summarised) and a *verbatim tail* (kept as it is):

* the tail is the newest run of whole turns worth at most ``keep_tokens`` (~20k) and ``keep_rows``
  rows. It starts at a user row when one fits (whole exchanges stay together), else at an
  assistant row (a tool group is never split: rows before an assistant row are complete at the idle
  boundary). The current exchange's start is the latest it may begin.
* a cycle is pending when the covered prefix holds at least ``threshold_tokens`` (16k) — so the
  window holds at most ~keep + threshold tokens before a compaction and ~keep + one summary after
  it, and one crossing yields exactly one compaction — or when the window has ``row_trigger`` rows,
  so the replay cap (500 rows) never silently cuts history that was never summarised.

A prefix that holds nothing but the previous summary is never pending: there is nothing new to fold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from loop.errors import HarnessError
from loop.events import EventKind
from loop.projection import EventRow
from loop.providers.base import Message

DEFAULT_THRESHOLD_TOKENS = 16_000
DEFAULT_KEEP_TOKENS = 20_000
MAX_COMPACTIONS_PER_EPISODE = 16
LATCH_PERMILLE = 500


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """Compaction settings; every number is overridable per agent or deployment.

    Attributes:
        enabled: Off means the window is only ever cut by the replay cap (the pre-L14 behaviour).
        threshold_tokens: Covered-prefix tokens that make a cycle pending.
        keep_tokens: Tokens the verbatim tail may hold.
        keep_rows: Rows the verbatim tail may hold.
        row_trigger: Window rows that make a cycle pending even below the token threshold.
        max_per_episode: Compactions allowed in one episode (a session's conversation in one narrative,
            across its exchanges); one more is a loud stop.
        latch_permille: Probe loss (per mille) at which the episode latches the conservative posture.
        clear_tool_results_over: Covered tool results above this many tokens reach the summariser
            as a stub with their salient lines (tool-result clearing).
        summary_max_tokens: What the summariser is asked to stay under (``max_output_tokens``).
    """

    enabled: bool = True
    threshold_tokens: int = DEFAULT_THRESHOLD_TOKENS
    keep_tokens: int = DEFAULT_KEEP_TOKENS
    keep_rows: int = 200
    row_trigger: int = 400
    max_per_episode: int = MAX_COMPACTIONS_PER_EPISODE
    latch_permille: int = LATCH_PERMILLE
    clear_tool_results_over: int = 256
    summary_max_tokens: int = 2_000

    def override(self, values: dict[str, Any] | None) -> CompactionPolicy:
        """A copy with ``values`` applied; unknown keys or non-positive numbers refuse loudly."""
        if not values:
            return self
        known = {f.name for f in fields(self)}
        changes: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise HarnessError(f"unknown compaction setting {key!r}", code="compaction_config_invalid")
            if key == "enabled":
                if not isinstance(value, bool):
                    raise HarnessError("compaction 'enabled' must be true or false", code="compaction_config_invalid")
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise HarnessError(f"compaction setting {key!r} must be a positive integer",
                                   code="compaction_config_invalid")
            changes[key] = value
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class WindowItem:
    """One row of the projected window, its message and the tokens it costs (0 for journal rows)."""

    row: EventRow
    tokens: int
    message: Message | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """A pending cycle: what is summarised and what stays verbatim, in window order."""

    covered: tuple[WindowItem, ...]
    tail: tuple[WindowItem, ...]
    reason: Literal["tokens", "rows"]

    @property
    def covered_tokens(self) -> int:
        return sum(item.tokens for item in self.covered)

    @property
    def tail_tokens(self) -> int:
        return sum(item.tokens for item in self.tail)

    @property
    def previous_seq(self) -> int | None:
        """The seq of the compaction this one rolls forward, if the window started at one."""
        first = self.covered[0].row if self.covered else None
        return first.seq if first is not None and first.kind == EventKind.COMPACTION else None


def _tail_start(items: Sequence[WindowItem], policy: CompactionPolicy) -> int | None:
    """Where the verbatim tail begins (an index > 0), or None when the window has no cut point.

    After a compaction the window is ``[summary, its tail…, newer rows…]``; the new tail may only
    start among the newer rows, so the covered rows stay one contiguous run of seqs.
    """
    lowest = 1
    if items and items[0].row.kind == EventKind.COMPACTION:
        boundary = items[0].row.seq
        lowest = next((i for i, item in enumerate(items) if item.row.seq > boundary), len(items))
    tokens = rows = 0
    fitting_user = fitting_any = latest_user = latest_any = None
    for index in range(len(items) - 1, max(lowest, 1) - 1, -1):
        tokens += items[index].tokens
        rows += 1
        kind = items[index].row.kind
        if kind not in (EventKind.USER, EventKind.ASSISTANT):
            continue
        fits = tokens <= policy.keep_tokens and rows <= policy.keep_rows
        if kind == EventKind.USER:
            latest_user = index if latest_user is None else latest_user
            if fits:
                fitting_user = index
        latest_any = index if latest_any is None else latest_any
        if fits:
            fitting_any = index
    for choice in (fitting_user, fitting_any, latest_user, latest_any):
        if choice is not None:
            return choice
    return None


def under_pressure(*, tokens: int, rows: int, policy: CompactionPolicy) -> bool:
    """A cheap pre-check on the whole window: False means no cycle can be pending."""
    return policy.enabled and (tokens >= policy.threshold_tokens or rows >= policy.row_trigger)


def plan_compaction(items: Sequence[WindowItem], policy: CompactionPolicy) -> Plan | None:
    """The pending cycle over ``items`` (the window, in order), or None when none is pending."""
    if not under_pressure(tokens=sum(item.tokens for item in items), rows=len(items), policy=policy):
        return None
    start = _tail_start(items, policy)
    if start is None:
        return None
    covered, tail = tuple(items[:start]), tuple(items[start:])
    fresh = [item for item in covered if item.row.kind != EventKind.COMPACTION]
    if not fresh:
        return None
    if sum(item.tokens for item in covered) >= policy.threshold_tokens:
        return Plan(covered, tail, "tokens")
    if len(items) >= policy.row_trigger:
        return Plan(covered, tail, "rows")
    return None
