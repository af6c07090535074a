"""Policy hooks (SPEC L13): ``loop.before_start``, ``loop.before_input``, ``loop.before_compaction``.

Constructor-injected, never env-driven. Each point runs its hooks in order (first deny wins)
under a 500 ms deadline: expiry denies and a late verdict is ignored; an exception is contained and
counted — never a denial, never a bypass. Deny reasons are cut to 160 characters and reported once
to ``deny_sink`` (the product writes one coarse audit row).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from enum import StrEnum

from loop.errors import HookError

HOOK_DEADLINE = 0.5
MAX_REASON = 160


class HookPoint(StrEnum):
    BEFORE_START = "loop.before_start"
    BEFORE_INPUT = "loop.before_input"
    BEFORE_COMPACTION = "loop.before_compaction"


@dataclass(frozen=True, slots=True)
class HookContext:
    point: HookPoint
    session_id: str
    exchange_id: str | None
    agent: str
    detail: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Allow:
    pass


@dataclass(frozen=True, slots=True)
class Deny:
    reason: str


Verdict = Allow | Deny
Hook = Callable[[HookContext], Verdict]


@dataclass(frozen=True, slots=True)
class HookResult:
    allowed: bool
    reason: str = ""
    timed_out: bool = False
    errors: int = 0


class HookDenied(HookError):
    def __init__(self, point: HookPoint, reason: str) -> None:
        super().__init__(f"{point.value} denied: {reason}", code="hook_denied")
        self.point = point
        self.reason = reason


_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="hook")


class LoopHooks:
    def __init__(
        self,
        hooks: Mapping[HookPoint, Sequence[Hook]] | None = None,
        *,
        deadline: float = HOOK_DEADLINE,
        deny_sink: Callable[[HookPoint, HookContext, str], None] | None = None,
    ) -> None:
        self._hooks = {point: tuple(found) for point, found in (hooks or {}).items()}
        self.deadline = deadline
        self.deny_sink = deny_sink
        self._lock = threading.Lock()
        self.error_count = 0
        self.deny_count = 0
        self.errors_by_point: Counter[str] = Counter()

    @classmethod
    def pass_through(cls) -> LoopHooks:
        return cls()

    def run(self, point: HookPoint, ctx: HookContext) -> HookResult:
        hooks = self._hooks.get(point, ())
        if not hooks:
            return HookResult(True)
        errors = 0
        end = time.monotonic() + self.deadline
        for hook in hooks:
            remaining = end - time.monotonic()
            if remaining <= 0:
                return self._deny(point, ctx, "hook deadline exceeded", timed_out=True, errors=errors)
            future = _POOL.submit(hook, ctx)
            try:
                verdict = future.result(timeout=remaining)
            except FutureTimeout:  # the late verdict is never applied
                return self._deny(point, ctx, "hook deadline exceeded", timed_out=True, errors=errors)
            except Exception:  # noqa: BLE001 - contained and counted: never a denial, never a bypass
                errors += 1
                with self._lock:
                    self.error_count += 1
                    self.errors_by_point[point.value] += 1
                continue
            if isinstance(verdict, Deny):
                return self._deny(point, ctx, verdict.reason, errors=errors)
        return HookResult(True, errors=errors)

    def _deny(self, point: HookPoint, ctx: HookContext, reason: str, *, timed_out: bool = False,
              errors: int = 0) -> HookResult:
        bounded = reason[:MAX_REASON]
        with self._lock:
            self.deny_count += 1
        if self.deny_sink is not None:
            self.deny_sink(point, ctx, bounded)
        return HookResult(False, bounded, timed_out, errors)
