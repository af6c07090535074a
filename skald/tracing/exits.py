"""Spans still in the batch leave with the process whenever it ends in order (issue 33).

The batch span processor sends what it holds every ``OTEL_BSP_SCHEDULE_DELAY``; what ended since the
last send is in memory. :func:`flush_at_exit` sends it:

* at a normal interpreter exit (``atexit``): daphne and the sweeper on SIGTERM (both handle it and
  return), the qcluster's leader, ``manage.py`` commands;
* when a forked ``multiprocessing`` child ends: a django-q2 worker, which leaves through
  ``os._exit`` after its loop and so never runs ``atexit`` hooks; a multiprocessing finaliser does run;
* on a SIGTERM that nothing else handles (a worker keeps the default, so a SIGTERM sent to it
  directly — systemd's control-group stop, ``kill``): the batch is sent, then the process dies of
  the signal as it would have.

A SIGKILL (or an OOM kill) runs nothing: it loses the spans that ended since the last send, at most
one schedule delay's worth. Nothing here makes spans durable; the trace goes on in the next process.
"""

from __future__ import annotations

import atexit
import multiprocessing.util
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["flush_at_exit"]

SIGTERM_FLUSH_MS = 2000  # how long a SIGTERM waits for the batch to go before the process dies


class _Registered:
    """What ``multiprocessing.util.register_after_fork`` holds (weakly): the hooks, for life."""

    def __init__(self, flush: Callable[[int], object]) -> None:
        self.flush = flush


_hooks: list[_Registered] = []


def flush_at_exit(flush: Callable[[int], object]) -> None:
    """Call ``flush(timeout_ms)`` whenever this process, or a child forked from it, ends in order
    or by an unhandled SIGTERM (once per process: later calls do nothing)."""
    if _hooks:
        return
    hook = _Registered(flush)
    _hooks.append(hook)
    atexit.register(flush, 30000)
    multiprocessing.util.register_after_fork(hook, _in_forked_child)
    _flush_on_sigterm(flush)


def _in_forked_child(hook: _Registered) -> None:
    # A forked child's finalisers are cleared before these hooks run; this one runs at its end.
    multiprocessing.util.Finalize(None, hook.flush, args=(30000,), exitpriority=10)
    _flush_on_sigterm(hook.flush)


def _flush_on_sigterm(flush: Callable[[int], object]) -> None:
    """A SIGTERM handler where the default (die at once) is in place, in the main thread only. A
    process that installs its own handler later (daphne, django-q2's leader, the sweeper) replaces
    this one and exits through ``atexit`` instead."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return

    def on_sigterm(signum: int, _frame: FrameType | None) -> None:
        try:
            flush(SIGTERM_FLUSH_MS)
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)  # dies of the signal, as it would have

    signal.signal(signal.SIGTERM, on_sigterm)
