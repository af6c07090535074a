"""Policy hooks (SPEC L13): waterfall, deadline, containment, bounded reasons, one sink call per deny."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from loop.errors import HookError
from loop.hooks import (
    DEADLINE_REASON,
    MAX_REASON,
    Allow,
    Deny,
    HookContext,
    HookDenied,
    HookPoint,
    HookResult,
    LoopHooks,
    Verdict,
)

START = HookPoint.BEFORE_START


def context(point: HookPoint = START) -> HookContext:
    return HookContext(point=point, session_id="s-1", exchange_id=None, agent="alice", detail={"k": 1})


def allow(_: HookContext) -> Verdict:
    return Allow()


def deny(reason: str):
    def hook(_: HookContext) -> Verdict:
        return Deny(reason)

    return hook


def explode(_: HookContext) -> Verdict:
    raise RuntimeError("policy service is down")


class Sink:
    def __init__(self) -> None:
        self.calls: list[tuple[HookPoint, HookContext, str]] = []

    def __call__(self, point: HookPoint, ctx: HookContext, reason: str) -> None:
        self.calls.append((point, ctx, reason))


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """An event that blocked hooks wait on; always set at teardown so no worker stays stuck."""
    event = threading.Event()
    yield event
    event.set()


def test_it_allows_everything_when_nothing_is_configured() -> None:
    hooks = LoopHooks.pass_through()

    for point in HookPoint:
        assert hooks.run(point, context(point)) == HookResult(allowed=True)
    assert hooks.deny_count == 0
    assert hooks.error_count == 0


def test_it_runs_only_the_hooks_of_the_point() -> None:
    hooks = LoopHooks({HookPoint.BEFORE_INPUT: [deny("no input today")]})

    assert hooks.run(START, context()).allowed
    assert not hooks.run(HookPoint.BEFORE_INPUT, context(HookPoint.BEFORE_INPUT)).allowed


def test_it_denies_with_the_reason_cut_to_160_characters() -> None:
    sink = Sink()
    hooks = LoopHooks({START: [deny("x" * 500)]}, deny_sink=sink)

    result = hooks.run(START, context())

    assert not result.allowed
    assert result.reason == "x" * MAX_REASON
    assert [call[2] for call in sink.calls] == ["x" * MAX_REASON]


def test_the_first_deny_wins_and_later_hooks_do_not_run() -> None:
    seen: list[str] = []

    def recording(name: str, verdict: Verdict):
        def hook(_: HookContext) -> Verdict:
            seen.append(name)
            return verdict

        return hook

    hooks = LoopHooks(
        {START: [recording("a", Allow()), recording("b", Deny("b says no")), recording("c", Deny("c says no"))]}
    )

    result = hooks.run(START, context())

    assert result.reason == "b says no"
    assert seen == ["a", "b"]


def test_it_allows_when_every_hook_allows() -> None:
    hooks = LoopHooks({START: [allow, allow]})

    assert hooks.run(START, context()) == HookResult(allowed=True)


def test_an_expired_deadline_denies_and_the_late_verdict_is_ignored(release: threading.Event) -> None:
    sink = Sink()
    finished = threading.Event()

    def slow(_: HookContext) -> Verdict:
        release.wait(10)
        finished.set()
        return Deny("late deny")

    pool = ThreadPoolExecutor(max_workers=1)
    hooks = LoopHooks({START: [slow]}, deny_sink=sink, executor=pool)

    result = hooks.run(START, context())

    assert result == HookResult(allowed=False, reason=DEADLINE_REASON, timed_out=True)
    assert not finished.is_set()  # the deadline answered while the hook was still running
    release.set()
    pool.shutdown(wait=True)  # the hook has returned its (late) verdict
    assert finished.is_set()
    assert hooks.deny_count == 1
    assert [call[2] for call in sink.calls] == [DEADLINE_REASON]


def test_the_deadline_covers_the_whole_chain(release: threading.Event) -> None:
    def dawdle(_: HookContext) -> Verdict:
        release.wait(0.15)
        return Allow()

    hooks = LoopHooks({START: [dawdle, dawdle, dawdle]}, deadline=0.3)

    result = hooks.run(START, context())

    assert result.timed_out and not result.allowed


def test_a_raising_hook_is_counted_and_neither_denies_nor_bypasses() -> None:
    sink = Sink()
    hooks = LoopHooks({START: [explode, allow], HookPoint.BEFORE_INPUT: [explode, deny("still no")]}, deny_sink=sink)

    allowed = hooks.run(START, context())
    denied = hooks.run(HookPoint.BEFORE_INPUT, context(HookPoint.BEFORE_INPUT))

    assert allowed == HookResult(allowed=True, errors=1)
    assert denied == HookResult(allowed=False, reason="still no", errors=1)
    assert hooks.error_count == 2
    assert hooks.errors_by_point == {START: 1, HookPoint.BEFORE_INPUT: 1}
    assert hooks.deny_count == 1
    assert len(sink.calls) == 1


def test_a_hook_returning_something_else_counts_as_an_error() -> None:
    hooks = LoopHooks({START: [lambda _: True, deny("no")]})  # type: ignore[list-item]

    assert hooks.run(START, context()) == HookResult(allowed=False, reason="no", errors=1)


def test_the_sink_is_called_once_per_deny() -> None:
    sink = Sink()
    hooks = LoopHooks({START: [deny("nope"), deny("never asked")]}, deny_sink=sink)
    ctx = context()

    for _ in range(3):
        hooks.run(START, ctx)

    assert sink.calls == [(START, ctx, "nope")] * 3
    assert hooks.deny_count == 3
    assert hooks.denies_by_point == {START: 3}


def test_it_refuses_a_context_built_for_another_point() -> None:
    with pytest.raises(ValueError, match=r"not loop\.before_start"):
        LoopHooks.pass_through().run(START, context(HookPoint.BEFORE_COMPACTION))


def test_the_context_detail_is_read_only() -> None:
    ctx = context()

    with pytest.raises(TypeError):
        ctx.detail["k"] = 2  # type: ignore[index]


def test_hook_denied_carries_the_point_and_the_bounded_reason() -> None:
    error = HookDenied(HookPoint.BEFORE_COMPACTION, "y" * 300)

    assert isinstance(error, HookError)
    assert error.code == "hook_denied"
    assert error.point is HookPoint.BEFORE_COMPACTION
    assert error.reason == "y" * MAX_REASON
    assert str(error).startswith("loop.before_compaction denied: ")
