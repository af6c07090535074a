"""The threads tools run on: reused, not started per call.

A tool runs on a thread of its own so the driver can stop waiting for it (a timeout, a stop) while
it keeps running. Starting and joining a thread per call cost about a tenth of a one-tool turn
(bench/profile_turn.py); a finished thread now waits for the next call instead, so a turn hands
its call to a live thread. A call that outlives its caller's patience keeps its thread busy until
it returns, and the next call gets another: capacity grows with stuck calls, as it did when every
call had a new thread. At most ``MAX_IDLE`` finished threads wait; more than that end.

The pool belongs to one process: a forked child (a worker started by fork) starts empty.
"""

from __future__ import annotations

import contextvars
import logging
import os
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)
MAX_IDLE = 8

Job = tuple[str, Callable[[], None], threading.Event]

_lock = threading.Lock()
_idle: list[queue.SimpleQueue[Job]] = []
_pid = os.getpid()


def _serve(inbox: queue.SimpleQueue[Job]) -> None:
    me = threading.current_thread()
    while True:
        name, target, done = inbox.get()
        me.name = name
        keep = False
        try:
            # A fresh context per call, as a new thread would have: nothing a call set in a
            # context variable reaches the next call on this thread.
            contextvars.Context().run(target)
        except Exception:
            logger.exception("%s raised out of its thread", name)
        finally:
            with _lock:  # idle again before the caller hears of it: its next call reuses this thread
                keep = len(_idle) < MAX_IDLE and _pid == os.getpid()
                if keep:
                    _idle.append(inbox)
            done.set()
        if not keep:
            return


def start(name: str, target: Callable[[], None]) -> threading.Event:
    """Run ``target`` on a pooled thread named ``name``; the returned event is set once it returned
    or raised (``target`` handles its own errors: one that escapes is logged)."""
    global _pid
    done = threading.Event()
    with _lock:
        if _pid != os.getpid():  # a forked child: the parent's threads do not exist here
            _pid = os.getpid()
            _idle.clear()
        inbox = _idle.pop() if _idle else None
    if inbox is None:
        inbox = queue.SimpleQueue()
        threading.Thread(target=_serve, args=(inbox,), name=name, daemon=True).start()
    inbox.put((name, target, done))
    return done
