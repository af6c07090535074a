"""The exec bridge (SPEC L11): run an allowlisted program from an argv array, never a shell.

Fail-closed by construction: an empty or unset ``BRAIN_ENGINE_EXEC_ALLOWLIST`` denies every
program. The child gets a minimal environment (nothing is inherited from the server), starts in
its own session so the whole process group can be killed on cancel or timeout (grandchildren
included), and its output is capped per stream while the pipes keep draining, so a chatty child
can neither deadlock nor flood memory. Anything left in the group when the leader exits is killed:
background processes do not outlive the call.

Where it runs is the :class:`~loop.tools.sandbox.Sandbox`'s business: unconfined by default (the
kernel's tests and machines without bubblewrap), confined to the workspace when the product passes
a :class:`~loop.tools.sandbox.Bubblewrap`. Confined, a program killed by a signal reports
``128 + signal`` (bubblewrap's convention) rather than a negative code.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loop.cancellation import CancelToken
from loop.errors import HarnessError, ToolError
from loop.tools.hints import RestartHint
from loop.tools.sandbox import Sandbox, Unconfined

__all__ = [
    "ALLOWLIST_VARIABLE",
    "DEFAULT_MAX_OUTPUT",
    "RESTART_HINT",
    "SAFE_PATH",
    "ExecBridge",
    "ExecResult",
    "parse_allowlist",
]

ALLOWLIST_VARIABLE = "BRAIN_ENGINE_EXEC_ALLOWLIST"
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
DEFAULT_MAX_OUTPUT = 16 * 1024
# An exec may have changed the world before a crash; recovery marks it, never replays it.
RESTART_HINT = RestartHint.MARK_INTERRUPTED

_READ_CHUNK = 64 * 1024
_POLL = 0.05  # upper bound on how late a leader's exit is noticed while its pipes stay open
_DRAIN_GRACE = 0.5  # how long to read pipes held open by a process that escaped the group
_RESERVED_ENV = frozenset({"PATH", "HOME"})


@dataclass(frozen=True, slots=True)
class ExecResult:
    """What a run produced.

    Attributes:
        exit_code: The child's exit status (negative: killed by that signal), or None when the
            bridge killed it (timeout or cancel).
        stdout: Standard output, capped and decoded as UTF-8 with replacement.
        stderr: Standard error, capped the same way.
        truncated: Either stream went over the cap; the rest was read and dropped.
        timed_out: The timeout expired and the process group was killed.
        cancelled: The cancel token fired and the process group was killed (or never started).
    """

    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool = False
    timed_out: bool = False
    cancelled: bool = False


def parse_allowlist(value: str | None) -> tuple[str, ...]:
    """Parse ``BRAIN_ENGINE_EXEC_ALLOWLIST``: comma-separated program names or absolute paths.

    Args:
        value: The raw setting; None or blank means deny all.

    Returns:
        The entries in order, without duplicates.

    Raises:
        HarnessError: An entry is a relative path or contains whitespace or NUL.
    """
    entries = [_checked_entry(raw.strip()) for raw in (value or "").split(",") if raw.strip()]
    return tuple(dict.fromkeys(entries))


def _checked_entry(entry: str) -> str:
    if "\0" in entry or any(char.isspace() for char in entry):
        raise HarnessError(f"{ALLOWLIST_VARIABLE}: entry {entry!r} is malformed", code="exec_allowlist_invalid")
    if "/" not in entry:
        return entry
    if not os.path.isabs(entry):
        raise HarnessError(
            f"{ALLOWLIST_VARIABLE}: {entry!r} must be a program name or an absolute path",
            code="exec_allowlist_invalid",
        )
    return os.path.normpath(entry)


def _checked_argv(argv: object) -> list[str]:
    if isinstance(argv, str | bytes) or not isinstance(argv, Sequence):
        raise ToolError("argv must be a list of strings, not a command line", code="exec_invalid_argv")
    items = list(argv)
    if not items or not all(isinstance(item, str) for item in items):
        raise ToolError("argv must be a non-empty list of strings", code="exec_invalid_argv")
    if any("\0" in item for item in items):
        raise ToolError("argv must not contain NUL characters", code="exec_invalid_argv")
    return items


class _ProcessGroup:
    """The child's process group. Signals go to the group only while its leader is unreaped:
    until then the leader's pid, which is the group id, cannot be reused by another process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        self._lock = threading.Lock()
        self._reaped = False

    def kill(self) -> None:
        with self._lock:
            if self._reaped:
                return
            try:
                os.killpg(self._process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def leader_exited(self) -> bool:
        try:
            # WNOWAIT leaves the zombie in place (see the class docstring).
            state = os.waitid(os.P_PID, self._process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return state is not None

    def reap(self) -> int:
        with self._lock:
            code = self._process.wait()
            self._reaped = True
            return code


@dataclass
class _Capture:
    stdout: bytearray
    stderr: bytearray
    truncated: bool = False
    timed_out: bool = False


class ExecBridge:
    """Runs allowlisted programs for the ``execute_cmd`` tool.

    Args:
        allowlist: Program names (resolved on :data:`SAFE_PATH`) or absolute paths. Empty denies all.
        max_output: Bytes kept per stream; more is read and dropped, and the result is truncated.
        env: Extra variables for the child, on top of the minimal environment (PATH and HOME are
            fixed by the bridge). Nothing is ever inherited from the server's environment.
        sandbox: Where the child runs; default :class:`~loop.tools.sandbox.Unconfined`.
    """

    restart_hint = RESTART_HINT

    def __init__(
        self,
        allowlist: Sequence[str],
        *,
        max_output: int = DEFAULT_MAX_OUTPUT,
        env: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        if isinstance(allowlist, str):
            raise TypeError("allowlist must be a sequence of entries; use from_env() to parse a setting")
        if max_output <= 0:
            raise ValueError("max_output must be positive")
        extra = dict(env or {})
        if reserved := _RESERVED_ENV & extra.keys():
            raise ValueError(f"env may not set {', '.join(sorted(reserved))}; the bridge fixes them")
        self._allowlist = tuple(dict.fromkeys(_checked_entry(entry) for entry in allowlist))
        self._max_output = max_output
        self._env = {"LANG": "C.UTF-8", **extra, "PATH": SAFE_PATH}
        self._sandbox: Sandbox = sandbox or Unconfined()

    @classmethod
    def from_env(
        cls,
        value: str | None,
        *,
        max_output: int = DEFAULT_MAX_OUTPUT,
        env: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ) -> ExecBridge:
        """Build a bridge from the raw ``BRAIN_ENGINE_EXEC_ALLOWLIST`` value (None or blank: deny all)."""
        return cls(parse_allowlist(value), max_output=max_output, env=env, sandbox=sandbox)

    @property
    def allowlist(self) -> tuple[str, ...]:
        return self._allowlist

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox

    def resolve(self, program: str) -> str:
        """The absolute executable for ``program``, if the allowlist admits it.

        Raises:
            ToolError: ``exec_denied`` when not allowlisted, ``exec_failed`` when not installed.
        """
        if not self._allowlist:
            raise ToolError(f"exec is disabled ({ALLOWLIST_VARIABLE} is empty)", code="exec_denied")
        if program not in self._allowlist:
            raise ToolError(f"program {program!r} is not on the exec allowlist", code="exec_denied")
        if os.path.isabs(program):
            return program
        found = shutil.which(program, path=SAFE_PATH)
        if found is None:
            raise ToolError(f"program {program!r} is not installed", code="exec_failed")
        return found

    def run(self, argv: Sequence[str], *, cancel: CancelToken, timeout: float, cwd: str) -> ExecResult:
        """Run ``argv`` in ``cwd`` and wait for it, the timeout, or cancellation.

        Args:
            argv: Program and arguments, passed to the program verbatim (no shell).
            cancel: Killing the process group is registered on it for the duration of the run.
            timeout: Seconds before the process group is killed.
            cwd: Absolute working directory (the workspace); it is also the child's HOME. A
                sandbox may show it to the child under another path.

        Returns:
            The capped output and how the run ended.

        Raises:
            ToolError: ``exec_invalid_argv``, ``exec_denied`` or ``exec_failed`` (could not start).
        """
        items = _checked_argv(argv)
        executable = self.resolve(items[0])
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if not os.path.isabs(cwd):
            raise ValueError("cwd must be an absolute path")
        if cancel.cancelled:
            return ExecResult(exit_code=None, stdout="", stderr="", cancelled=True)
        deadline = time.monotonic() + timeout
        try:
            launch = self._sandbox.launch(executable, items, workspace=cwd, env=self._env)
            process = subprocess.Popen(
                **launch.popen_kwargs(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group: one killpg reaches grandchildren
            )
        except OSError as error:
            raise ToolError(f"could not start {items[0]!r}: {error.strerror}", code="exec_failed") from None

        group = _ProcessGroup(process)
        fired = threading.Event()

        def on_cancel() -> None:  # runs in the cancelling thread
            fired.set()
            group.kill()

        unregister = cancel.on_cancel(on_cancel)
        try:
            capture = self._capture(process, group, deadline)
        finally:
            group.kill()  # stragglers, or everything if capturing failed
            exit_code = group.reap()
            unregister()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        cancelled = fired.is_set()
        return ExecResult(
            exit_code=None if cancelled or capture.timed_out else exit_code,
            stdout=capture.stdout.decode("utf-8", errors="replace"),
            stderr=capture.stderr.decode("utf-8", errors="replace"),
            truncated=capture.truncated,
            timed_out=capture.timed_out,
            cancelled=cancelled,
        )

    def _capture(self, process: subprocess.Popen[bytes], group: _ProcessGroup, deadline: float) -> _Capture:
        assert process.stdout is not None and process.stderr is not None
        capture = _Capture(stdout=bytearray(), stderr=bytearray())
        buffers = {process.stdout.fileno(): capture.stdout, process.stderr.fileno(): capture.stderr}
        with selectors.DefaultSelector() as selector:
            for pipe in (process.stdout, process.stderr):
                selector.register(pipe, selectors.EVENT_READ)
            drain_until: float | None = None
            idle = 0.001
            while True:
                now = time.monotonic()
                if drain_until is None and group.leader_exited():
                    group.kill()  # background children must not outlive the call
                    drain_until = now + _DRAIN_GRACE
                elif drain_until is None and now >= deadline and not capture.timed_out:
                    capture.timed_out = True
                    group.kill()
                if drain_until is not None and (not selector.get_map() or now >= drain_until):
                    return capture
                if selector.get_map():
                    limit = drain_until if drain_until is not None else deadline
                    for key, _ in selector.select(timeout=min(_POLL, max(0.0, limit - now))):
                        self._read(key, selector, buffers, capture)
                else:
                    # Both pipes closed but the leader lives on: back off until it exits or is killed.
                    selector.select(timeout=idle)  # nothing registered, so this only sleeps
                    idle = min(idle * 2, _POLL)

    def _read(
        self,
        key: selectors.SelectorKey,
        selector: selectors.BaseSelector,
        buffers: dict[int, bytearray],
        capture: _Capture,
    ) -> None:
        chunk = os.read(key.fd, _READ_CHUNK)
        if not chunk:
            selector.unregister(key.fileobj)
            return
        buffer = buffers[key.fd]
        room = self._max_output - len(buffer)
        if len(chunk) > room:
            capture.truncated = True  # keep draining so the child never blocks on a full pipe
        if room > 0:
            buffer += chunk[:room]
