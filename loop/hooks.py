"""Policy hooks at three loop boundaries (SPEC L13).

Hooks are constructor-injected (never read from the environment) and run as a waterfall: in
order, the first :class:`Deny` wins. The whole chain for one point shares a deny-closed deadline
(:data:`HOOK_DEADLINE`): when it expires the step is denied and whatever the running hook returns
later is never looked at. A hook that raises is contained and counted; it is neither a denial nor
a bypass, so the next hook still runs and decides. With no hooks configured,
:meth:`LoopHooks.pass_through` allows everything without touching a thread.

Hooks run on a small shared thread pool because a thread cannot be interrupted: a hook that
never returns keeps its worker. If every worker is stuck, later hooks queue, miss their deadline
and deny, which is the fail-closed direction.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TypeAlias

from loop.errors import HookError

__all__ = [
    "DEADLINE_REASON",
    "HOOK_DEADLINE",
    "MAX_REASON",
    "Allow",
    "Deny",
    "Hook",
    "HookContext",
    "HookDenied",
    "HookPoint",
    "HookResult",
    "LoopHooks",
    "Verdict",
    "bound_reason",
]

HOOK_DEADLINE = 0.5  # seconds for all hooks at one point together
MAX_REASON = 160
DEADLINE_REASON = "hook deadline exceeded"
_POOL_WORKERS = 4


class HookPoint(StrEnum):
    """The three boundaries where operator policy may stop the loop."""

    BEFORE_START = "loop.before_start"  # before the claim and the invocation row
    BEFORE_INPUT = "loop.before_input"  # after the claim, before admission and the provider
    BEFORE_COMPACTION = "loop.before_compaction"  # only when a compaction is genuinely pending


@dataclass(frozen=True, slots=True)
class Allow:
    """Let the step proceed (as far as this hook is concerned)."""


@dataclass(frozen=True, slots=True)
class Deny:
    """Stop the step. ``reason`` is operator-facing and cut to :data:`MAX_REASON` characters."""

    reason: str


Verdict: TypeAlias = Allow | Deny


@dataclass(frozen=True, slots=True)
class HookContext:
    """What a hook may look at. ``detail`` is read-only and holds no conversation payload."""

    point: HookPoint
    session_id: str
    exchange_id: str | None
    agent: str
    detail: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "detail", MappingProxyType(dict(self.detail)))


Hook: TypeAlias = Callable[[HookContext], Verdict]
DenySink: TypeAlias = Callable[[HookPoint, HookContext, str], None]
ErrorSink: TypeAlias = Callable[[HookPoint, HookContext, int], None]


@dataclass(frozen=True, slots=True)
class HookResult:
    """The waterfall's outcome at one point.

    Attributes:
        allowed: True when no hook denied and the deadline held.
        reason: The bounded deny reason; empty when allowed.
        timed_out: The deadline expired before the chain finished.
        errors: Hooks that raised (or returned something other than a verdict) and were skipped.
    """

    allowed: bool
    reason: str = ""
    timed_out: bool = False
    errors: int = 0


class HookDenied(HookError):
    """A hook denied a step; the driver raises or reports this. Carries the bounded reason."""

    def __init__(self, point: HookPoint, reason: str) -> None:
        bounded = bound_reason(reason)
        super().__init__(f"{point} denied: {bounded}")
        self.point = point
        self.reason = bounded


def bound_reason(reason: str) -> str:
    """Cut a deny reason to :data:`MAX_REASON` characters; an empty reason becomes "denied"."""
    return reason[:MAX_REASON] if reason else "denied"


_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_POOL_WORKERS, thread_name_prefix="loop-hook")
        return _pool


class LoopHooks:
    """The hook registry the driver consults at each :class:`HookPoint`.

    Args:
        hooks: Hooks per point, run in the given order. Points without hooks allow.
        deadline: Seconds all hooks at one point may take together (tests shorten it).
        deny_sink: Called exactly once per deny with the bounded reason; the product writes one
            coarse audit row there. Its own failures propagate: a deny that cannot be audited
            must not pass quietly.
        error_sink: Called once per waterfall in which hooks raised, with how many did; the product
            records it so errors are counted across processes (``/metrics``).
        executor: Where hooks run; defaults to a small pool shared by every registry.
    """

    def __init__(
        self,
        hooks: Mapping[HookPoint, Sequence[Hook]] | None = None,
        *,
        deadline: float = HOOK_DEADLINE,
        deny_sink: DenySink | None = None,
        error_sink: ErrorSink | None = None,
        executor: Executor | None = None,
    ) -> None:
        if deadline <= 0:
            raise ValueError("hook deadline must be positive")
        self._hooks: dict[HookPoint, tuple[Hook, ...]] = {
            HookPoint(point): tuple(chain) for point, chain in (hooks or {}).items() if chain
        }
        self._deadline = deadline
        self._deny_sink = deny_sink
        self._error_sink = error_sink
        self._executor = executor
        self._lock = threading.Lock()
        self._denies: Counter[HookPoint] = Counter()
        self._errors: Counter[HookPoint] = Counter()

    @classmethod
    def pass_through(cls) -> LoopHooks:
        """The registry used when no operator policy is supplied: every point allows."""
        return cls()

    @property
    def deny_count(self) -> int:
        with self._lock:
            return sum(self._denies.values())

    @property
    def error_count(self) -> int:
        with self._lock:
            return sum(self._errors.values())

    @property
    def denies_by_point(self) -> Counter[HookPoint]:
        with self._lock:
            return Counter(self._denies)

    @property
    def errors_by_point(self) -> Counter[HookPoint]:
        with self._lock:
            return Counter(self._errors)

    def configured(self, point: HookPoint) -> bool:
        """Whether any hook is registered at ``point``."""
        return point in self._hooks

    def run(self, point: HookPoint, ctx: HookContext) -> HookResult:
        """Run the waterfall at ``point``.

        Args:
            point: The boundary being crossed.
            ctx: What the hooks see; ``ctx.point`` must equal ``point``.

        Returns:
            Allowed, or denied with a bounded reason (also on deadline expiry).

        Raises:
            ValueError: ``ctx`` was built for another point.
        """
        if ctx.point != point:
            raise ValueError(f"hook context is for {ctx.point}, not {point}")
        chain = self._hooks.get(point, ())
        if not chain:
            return HookResult(allowed=True)
        executor = self._executor or _shared_pool()
        expires = time.monotonic() + self._deadline
        errors = 0
        for hook in chain:
            future = executor.submit(hook, ctx)
            try:
                verdict = future.result(timeout=max(0.0, expires - time.monotonic()))
            except FutureTimeout:
                # The hook keeps its thread; its verdict lands in a future nobody reads again.
                future.cancel()
                self._count_errors(point, ctx, errors)
                return self._deny(point, ctx, DEADLINE_REASON, timed_out=True, errors=errors)
            except Exception:  # noqa: BLE001 - a broken hook is counted, never a deny or a bypass
                errors += 1
                continue
            if isinstance(verdict, Deny):
                self._count_errors(point, ctx, errors)
                return self._deny(point, ctx, bound_reason(verdict.reason), errors=errors)
            if not isinstance(verdict, Allow):
                errors += 1  # not a verdict: a broken hook, handled like one that raised
        self._count_errors(point, ctx, errors)
        return HookResult(allowed=True, errors=errors)

    def _count_errors(self, point: HookPoint, ctx: HookContext, errors: int) -> None:
        if errors:
            with self._lock:
                self._errors[point] += errors
            if self._error_sink is not None:
                self._error_sink(point, ctx, errors)

    def _deny(
        self, point: HookPoint, ctx: HookContext, reason: str, *, errors: int, timed_out: bool = False
    ) -> HookResult:
        with self._lock:
            self._denies[point] += 1
        if self._deny_sink is not None:
            self._deny_sink(point, ctx, reason)
        return HookResult(allowed=False, reason=reason, timed_out=timed_out, errors=errors)
