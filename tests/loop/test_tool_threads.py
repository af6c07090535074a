"""Tools run on reused threads (loop.tools.threads): a call gets a live thread, a stuck call does
not hold up the next one, and nothing one call leaves in a context variable reaches the next."""

from __future__ import annotations

import contextvars
import threading

from loop.tools import threads

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="")


def test_a_finished_thread_serves_the_next_call() -> None:
    seen: list[int] = []
    for _ in range(3):
        done = threads.start("tool:probe", lambda: seen.append(threading.get_ident()))
        assert done.wait(10)
    assert len(set(seen)) == 1


def test_a_stuck_call_keeps_its_thread_and_the_next_call_gets_another() -> None:
    release = threading.Event()
    stuck = threads.start("tool:stuck", lambda: release.wait(30))
    ran = threading.Event()
    assert threads.start("tool:next", ran.set).wait(10)
    assert ran.is_set() and not stuck.is_set()
    release.set()
    assert stuck.wait(10)


def test_the_thread_is_named_for_its_call_and_context_variables_do_not_leak() -> None:
    names: list[str] = []
    marks: list[str] = []

    def first() -> None:
        names.append(threading.current_thread().name)
        MARK.set("left behind")

    def second() -> None:
        names.append(threading.current_thread().name)
        marks.append(MARK.get())

    assert threads.start("tool:first", first).wait(10)
    assert threads.start("tool:second", second).wait(10)
    assert names == ["tool:first", "tool:second"]
    assert marks == [""]


def test_an_error_that_escapes_is_logged_and_still_signals(caplog) -> None:
    def boom() -> None:
        raise RuntimeError("escaped")

    assert threads.start("tool:boom", boom).wait(10)
    ran = threading.Event()
    assert threads.start("tool:after", ran.set).wait(10)
    assert ran.is_set()
    assert "tool:boom raised out of its thread" in caplog.text
