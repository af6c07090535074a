"""A driver's companion thread: it keeps the claim's lease alive and notices a stop made elsewhere.

The token is the in-process truth (SPEC L12); the store is the cross-process one. The watcher
polls the store at an interval and fires the token, so every seam that watches the token (the
provider stream, the exec bridge, the round boundary) stops within one interval. It also renews
the exchange's lease (SPEC R2) every third of the lease, so a long tool call keeps its claim while
a killed worker's claim lapses and recovery takes over. A lease found lost (another driver took
over) stops this driver too.
"""

from __future__ import annotations

import logging
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
    """``with StopWatcher(store, exchange_id, token, interval, claim=...):`` while driving.

    It survives an infrastructure failure of the store (:mod:`loop.tools.infra`): it backs off up
    to ``BACKOFF_MAX_SECONDS`` and polls (and renews) again. Any other failure fires the token.
    """

    transient_errors = 0  # across the process, for logs and tests

    def __init__(
        self, source: DriveSource, exchange_id: int, token: CancelToken, interval: float, *, claim: str = ""
    ) -> None:
        self._source, self._exchange_id, self._token, self._interval = source, exchange_id, token, interval
        self._claim = claim
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stop-watch:{exchange_id}", daemon=True)

    def _run(self) -> None:
        renew_every = self._source.lease_seconds / 3
        renewed = time.monotonic()
        wait = self._interval
        try:
            while not self._stop.wait(wait) and not self._token.cancelled:
                try:
                    if self._claim and time.monotonic() - renewed >= renew_every:
                        if not self._source.renew(self._exchange_id, self._claim):
                            self._token.cancel(LEASE_LOST)
                            return
                        renewed = time.monotonic()
                    requested = self._source.cancel_requested(self._exchange_id)
                except Exception as exc:
                    if not is_infrastructure_error(exc):
                        raise
                    # Transient (a dropped connection, a restart, a full pool): drop the broken
                    # connection, back off, poll again, so a stop is still seen once it answers.
                    StopWatcher.transient_errors += 1
                    logger.warning("stop watcher of exchange %s: %r; retrying", self._exchange_id, exc)
                    self._source.release_thread()
                    wait = min(max(wait * 2, self._interval), BACKOFF_MAX_SECONDS)
                    continue
                wait = self._interval
                if requested:
                    self._token.cancel("stop requested")
        except Exception as exc:
            # Anything else is a bug: stop the turn rather than let it run unwatched.
            logger.exception("stop watcher of exchange %s failed; stopping the turn", self._exchange_id)
            self._token.cancel(f"stop watcher failed ({type(exc).__name__})")
        finally:
            self._source.release_thread()

    def __enter__(self) -> StopWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)
