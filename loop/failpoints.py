"""Named crash points (SPEC R1 proof): a process listed to die at a point dies there, for real.

``SKALD_FAILPOINTS`` holds comma-separated names; :func:`failpoint` reads it at call time and, when
its name is listed, kills the process with SIGKILL at once — no ``finally`` blocks, no ``atexit``,
exactly like a lost machine. Unset, a failpoint costs one dict lookup on ``os.environ``. The crash
tests (``make crash``) set the variable for a worker, let it die at the point, restart it and check
the invariants.
"""

from __future__ import annotations

import os
import signal

ENV = "SKALD_FAILPOINTS"
# A directory: each listed point then fires once across processes (the first to reach it creates a
# marker file and dies; a restarted worker passes it), so a crash test can restart into recovery.
ONCE_ENV = "SKALD_FAILPOINTS_ONCE"

FAILPOINTS: tuple[str, ...] = (
    "loop.after_admission",
    "loop.after_claim",
    "loop.before_message_end",
    "loop.after_message_end",
    "loop.after_intent",
    "loop.inside_tool",
    "loop.after_tool_result",
    "loop.before_settle",
    "loop.after_settle",
    "loop.compaction.before_row",
    "loop.compaction.after_row",
    "delegation.after_child_open",
    "delegation.before_child_close",
    "delegation.after_child_close",
    "delegation.before_delivery",
    "jobs.after_run_end",
    "jobs.during_dead_letter_retry",
    "approvals.after_take",
    "notify.before_send",
    "notify.after_claim",
)


def failpoint(name: str) -> None:
    """Die here (SIGKILL) when ``name`` is listed in ``SKALD_FAILPOINTS``."""
    listed = os.environ.get(ENV)
    if listed and name in listed.split(","):
        once = os.environ.get(ONCE_ENV)
        if once:
            try:
                os.close(os.open(os.path.join(once, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
        os.kill(os.getpid(), signal.SIGKILL)
