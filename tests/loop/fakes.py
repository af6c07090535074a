"""In-memory fakes of the kernel's ports (audit sink, bus, clock) and scripted test parts.

With these, ``tests/loop`` needs nothing from ``skald``: the store still runs on the Django test
database (the store *is* the ORM), but audit rows, wake-ups and time stay in the test's hands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

from loop.cancellation import CancelToken
from loop.ports import AuditRecord, GateCall, GateVerdict, ToolContext, TurnScope
from loop.providers.base import Delta, MessageEnd, ProviderRequest, TextDelta
from loop.recovery import resolve_pending
from loop.tools.hints import RestartHint
from loop.tools.registry import FunctionTool


@dataclass(frozen=True)
class AuditRow:
    label: str
    principal: str
    subject_type: str
    subject_id: str
    payload: Mapping[str, Any]


@dataclass
class MemoryAuditSink:
    """Keeps every audit row the store appends, in order (rows of a rolled-back transaction too:
    the fake cannot see transactions, so tests read it after commits only)."""

    rows: list[AuditRow] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def append(
        self, label: str, *, principal: str, subject_type: str, subject_id: str, payload: Mapping[str, Any]
    ) -> None:
        with self._lock:
            self.rows.append(AuditRow(label, principal, subject_type, subject_id, dict(payload)))

    def append_statement(self, records: Sequence[AuditRecord]) -> tuple[str, list[Any]]:
        with self._lock:
            self.rows.extend(AuditRow(r.label, r.principal, r.subject_type, r.subject_id, dict(r.payload))
                             for r in records)
        return "", []

    def labels(self, subject_type: str | None = None) -> list[str]:
        return [row.label for row in self.rows if subject_type is None or row.subject_type == subject_type]


@dataclass
class MemoryBus:
    """Records wake-ups (after commit) and live deltas."""

    wakes: list[tuple[int, int]] = field(default_factory=list)
    deltas: list[tuple[int, Mapping[str, Any]]] = field(default_factory=list)

    def committed(self, session_id: int, last_seq: int) -> None:
        self.wakes.append((session_id, last_seq))

    def delta(self, session_id: int, payload: Mapping[str, Any]) -> None:
        self.deltas.append((session_id, dict(payload)))


@dataclass
class SteppingClock:
    """Each reading is one millisecond after the previous one: deterministic and strictly rising."""

    current: datetime = field(default_factory=lambda: datetime(2026, 1, 5, 9, 0, tzinfo=UTC))
    step: timedelta = timedelta(milliseconds=1)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now(self) -> datetime:
        with self._lock:
            self.current += self.step
            return self.current

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.current += timedelta(seconds=seconds)


class ScriptedGate:
    """allow unless the tool is listed in ``deny`` or ``require``; ``deny_all`` denies everything."""

    def __init__(self, deny: set[str] | None = None, require: set[str] | None = None, *,
                 deny_all: bool = False) -> None:
        self.deny = deny or set()
        self.require = require or set()
        self.deny_all = deny_all
        self.checked: list[GateCall] = []
        self.parked: list[GateCall] = []

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        self.checked.append(call)
        if scope is None or self.deny_all or call.tool in self.deny:
            return GateVerdict("deny", "scripted deny")
        if call.tool in self.require:
            return GateVerdict("require", "scripted require")
        return GateVerdict("allow")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> Mapping[str, Any]:
        self.parked.append(call)
        return {"reason": verdict.reason}


class StreamUntilStopped:
    """A provider that streams one delta, says so (``streaming``), then waits for the turn's token.

    Without a stop it would end the turn normally after ``patience`` seconds, so a stop that never
    arrives shows up as a completed exchange, not as a hung test.
    """

    name = "stream-until-stopped"

    def __init__(self, patience: float = 10.0) -> None:
        self.streaming = threading.Event()
        self.patience = patience
        self.deltas_after_stop = 0

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        yield TextDelta("thinking ")
        self.streaming.set()
        cancel.wait(self.patience)
        yield TextDelta("still thinking")
        yield MessageEnd()


class Rendezvous:
    """Tools that meet: each call counts itself in, records the peak concurrency, and waits at a
    barrier of ``parties`` — a round that is not concurrent never gets past it."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0
        self.threads: set[int] = set()

    def __call__(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            self.threads.add(threading.get_ident())
        try:
            self.barrier.wait()
        finally:
            with self._lock:
                self.active -= 1
        return f"met {arguments.get('n', '')}"

    def tool(self, name: str = "meet") -> FunctionTool:
        return FunctionTool(name, "Meet the others.", {"type": "object"}, self, concurrency_safe=True)


class Held:
    """A tool that announces it is running (``entered``) and holds until its call is canceled."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.log: list[str] = []

    def __call__(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.log.append(f"enter {arguments.get('n', '')}")
        self.entered.set()
        released = context.cancel.wait(float(arguments.get("hold", 10)))
        self.log.append(f"exit {arguments.get('n', '')}")
        return "released by a stop" if released else "held to the end"


class Effects:
    """A tool whose runs we count (each run is one effect); ``.tool`` registers it."""

    def __init__(self, name: str, hint: str = RestartHint.RERUN) -> None:
        self.runs = 0
        self.tool = FunctionTool(name, "An effect.", {"type": "object"}, self, restart_hint=hint)

    def __call__(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        self.runs += 1
        return f"{self.tool.name} #{self.runs}"


def wait_until(probe: Callable[[], Any], what: str, timeout: float = 20.0) -> Any:
    """Poll ``probe`` until it is truthy (its value is returned); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting until {what}")


class WatchSource:
    """A stop watcher's store in memory (:class:`loop.watch.DriveSource`): ``stop(id)`` requests a
    stop, ``fail[id]`` is raised by that exchange's polls, ``lost`` exchanges fail their renewal.
    It counts polls, renewals and ``release_thread`` calls, and notes the threads that polled."""

    def __init__(self, lease_seconds: float = 30.0) -> None:
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self.stopped: set[int] = set()
        self.fail: dict[int, Exception] = {}
        self.lost: set[int] = set()
        self.polls: dict[int, int] = {}
        self.renewals: dict[int, int] = {}
        self.releases = 0
        self.threads: set[str] = set()

    def stop(self, exchange_id: int) -> None:
        with self._lock:
            self.stopped.add(exchange_id)

    def cancel_requested(self, exchange_id: int) -> bool:
        with self._lock:
            self.polls[exchange_id] = self.polls.get(exchange_id, 0) + 1
            self.threads.add(threading.current_thread().name)
            error = self.fail.get(exchange_id)
            stopped = exchange_id in self.stopped
        if error is not None:
            raise error
        return stopped

    def renew(self, exchange_id: int, token: str) -> bool:
        with self._lock:
            self.renewals[exchange_id] = self.renewals.get(exchange_id, 0) + 1
            return exchange_id not in self.lost

    def release_thread(self) -> None:
        with self._lock:
            self.releases += 1


def approve_in_thread(env: Any, call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Approve a parked ``call`` on a thread of its own (as a resolver process would), started;
    its outcome lands in the returned box under ``result``."""
    box: dict[str, Any] = {}

    def resolve() -> None:
        try:
            box["result"] = resolve_pending(env, call, resolution="approve", reason="", claim_token="resolver")
        finally:
            connection.close()

    worker = threading.Thread(target=resolve)
    worker.start()
    return worker, box
