"""A driver's companion: it keeps the claim's lease alive and notices a stop made elsewhere.

The token is the in-process truth (SPEC L12); the store is the cross-process one. The watcher
polls the store at an interval and fires the token, so every seam that watches the token (the
provider stream, the exec bridge, the round boundary) stops within one interval. It also renews
the exchange's lease (SPEC R2) every third of the lease, so a long tool call keeps its claim while
a killed worker's claim lapses and recovery takes over. A lease found lost (another driver took
over) stops this driver too.

One thread per process watches every exchange the process drives. A thread per exchange cost its
start and its stop + join on every turn (about 0.35 ms of a 5 ms bench turn, most turns ending
long before the first poll); now ``with StopWatcher(...)`` only registers an entry (a lock, a dict
insert, a notify when the entry is due before the thread would wake anyway) and unregisters it on
exit without waiting. The thread is started lazily, once per pid (django-q2 forks or spawns its
workers, and a forked child has no thread of its parent). Each entry keeps its own schedule: poll
every ``interval``, renew every third of the lease, back off on an infrastructure error. Entries
are polled one after the other, each in its own ``try``: a slow poll delays the others (a stop is
seen later), a failing one stops only its own turn. The thread holds a database connection only
while it has entries: once the last one leaves it releases the connections of the stores it
polled (a lingering connection would keep e.g. a test database from being dropped).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from typing import Protocol

from loop.cancellation import CancelToken
from loop.tools.infra import is_infrastructure_error

logger = logging.getLogger(__name__)
BACKOFF_MAX_SECONDS = 5.0

LEASE_LOST = "lease lost: another driver took over this exchange"


class DriveSource(Protocol):
    lease_seconds: float

    def cancel_requested(self, exchange_id: int) -> bool: ...

    def renew(self, exchange_id: int, token: str) -> bool: ...

    def release_thread(self) -> None: ...


class StopWatcher:
    """``with StopWatcher(store.exchanges, exchange_id, token, interval, claim=...):`` while driving.

    It survives an infrastructure failure of the store (:mod:`loop.tools.infra`): it backs off up
    to ``BACKOFF_MAX_SECONDS`` and polls (and renews) again. Any other failure fires the token.
    """

    transient_errors = 0  # across the process, for logs and tests

    def __init__(
        self, source: DriveSource, exchange_id: int, token: CancelToken, interval: float, *, claim: str = ""
    ) -> None:
        self._source, self._exchange_id, self._token, self._interval = source, exchange_id, token, interval
        self._claim = claim
        self._renew_every = source.lease_seconds / 3
        self._wait = interval  # grows while the store fails (back-off)
        self._due = self._renewed = 0.0  # monotonic; _due is read and written under the watcher's lock
        self._home: _Watcher | None = None

    def __enter__(self) -> StopWatcher:
        now = time.monotonic()
        self._due, self._renewed = now + self._interval, now
        self._home = _watcher()
        self._home.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._home is not None:
            self._home.discard(self)

    def _poll(self) -> float | None:
        """One poll, in the watcher thread: the wait until the next one, or None when done."""
        if self._token.cancelled:
            return None
        try:
            try:
                if self._claim and time.monotonic() - self._renewed >= self._renew_every:
                    if not self._source.renew(self._exchange_id, self._claim):
                        self._token.cancel(LEASE_LOST)
                        return None
                    self._renewed = time.monotonic()
                requested = self._source.cancel_requested(self._exchange_id)
            except Exception as exc:
                if not is_infrastructure_error(exc):
                    raise
                # Transient (a dropped connection, a restart, a full pool): drop the broken
                # connection, back off, poll again, so a stop is still seen once it answers.
                StopWatcher.transient_errors += 1
                logger.warning("stop watcher of exchange %s: %r; retrying", self._exchange_id, exc)
                self._source.release_thread()
                self._wait = min(max(self._wait * 2, self._interval), BACKOFF_MAX_SECONDS)
                return self._wait
        except Exception as exc:
            # Anything else is a bug: stop the turn rather than let it run unwatched.
            logger.exception("stop watcher of exchange %s failed; stopping the turn", self._exchange_id)
            self._token.cancel(f"stop watcher failed ({type(exc).__name__})")
            return None
        self._wait = self._interval
        if requested:
            self._token.cancel("stop requested")
            return None
        return self._wait


class _Watcher:
    """The process's watcher thread and the entries it watches."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Condition(threading.Lock())
        self._entries: dict[StopWatcher, None] = {}  # an ordered set
        self._polled: dict[int, DriveSource] = {}  # sources polled since the last release, by id
        self._wake_at = -math.inf  # when the thread wakes by itself: inf idle, -inf busy polling
        self._thread: threading.Thread | None = None

    def add(self, entry: StopWatcher) -> None:
        with self._lock:
            self._entries[entry] = None
            if self._thread is None:
                self._wake_at = -math.inf
                self._thread = threading.Thread(target=self._run, name=f"stop-watch:{self.pid}", daemon=True)
                self._thread.start()
            elif entry._due < self._wake_at:
                self._lock.notify()

    def discard(self, entry: StopWatcher) -> None:
        with self._lock:
            self._entries.pop(entry, None)
            if not self._entries and self._polled:
                self._lock.notify()  # nothing left to watch: release the connection now

    def _run(self) -> None:
        try:
            while True:
                batch, idle = self._next()
                for source in idle:
                    try:
                        source.release_thread()
                    except Exception:
                        logger.exception("stop watcher: releasing the connection failed")
                polled = [(entry, entry._poll()) for entry in batch]
                done = time.monotonic()
                with self._lock:
                    for entry, wait in polled:
                        if wait is None:
                            self._entries.pop(entry, None)
                        else:
                            entry._due = done + wait
        except Exception as exc:  # a bug here: stop what was watched rather than leave it unwatched
            logger.exception("stop watcher thread failed; stopping the turns it watched")
            with self._lock:
                orphans, self._entries, self._thread = list(self._entries), {}, None
                used, self._polled = list(self._polled.values()), {}
            for entry in orphans:
                entry._token.cancel(f"stop watcher failed ({type(exc).__name__})")
            for source in used:
                source.release_thread()

    def _next(self) -> tuple[list[StopWatcher], list[DriveSource]]:
        """Wait for the entries due now; or, when none is left, the sources whose connection to release."""
        with self._lock:
            while True:
                if not self._entries:
                    if self._polled:
                        idle = list(self._polled.values())
                        self._polled.clear()
                        return [], idle
                    self._wake_at = math.inf
                    self._lock.wait()
                    continue
                now = time.monotonic()
                wake_at = min(entry._due for entry in self._entries)
                if wake_at <= now:
                    self._wake_at = -math.inf  # entries added meanwhile are seen on the next pass
                    batch = [entry for entry in self._entries if entry._due <= now]
                    for entry in batch:
                        self._polled.setdefault(id(entry._source), entry._source)
                    return batch, []
                self._wake_at = wake_at
                self._lock.wait(wake_at - now)


_process: _Watcher | None = None
_process_lock = threading.Lock()


def _watcher() -> _Watcher:
    """This process's watcher, made on first use (a forked child makes its own)."""
    global _process
    watcher = _process
    if watcher is None or watcher.pid != os.getpid():
        with _process_lock:
            if _process is None or _process.pid != os.getpid():
                _process = _Watcher()
            watcher = _process
    return watcher


def _after_fork() -> None:
    global _process_lock
    _process_lock = threading.Lock()  # it may have been held by a thread the child does not have


os.register_at_fork(after_in_child=_after_fork)
