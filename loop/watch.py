"""A driver's companion thread: it notices a stop requested from another process.

The token is the in-process truth (SPEC L12); the store is the cross-process one. The watcher
polls the store at an interval and fires the token, so every seam that watches the token (the
provider stream, the exec bridge, the round boundary) stops within one interval.
"""

from __future__ import annotations

import threading
from typing import Protocol

from loop.cancellation import CancelToken


class StopSource(Protocol):
    def cancel_requested(self, exchange_id: int) -> bool: ...

    def release_thread(self) -> None: ...


class StopWatcher:
    """``with StopWatcher(store, exchange_id, token, interval):`` polls for a stop while driving."""

    def __init__(self, source: StopSource, exchange_id: int, token: CancelToken, interval: float) -> None:
        self._source, self._exchange_id, self._token, self._interval = source, exchange_id, token, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"stop-watch:{exchange_id}", daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval) and not self._token.cancelled:
                if self._source.cancel_requested(self._exchange_id):
                    self._token.cancel("stop requested")
        finally:
            self._source.release_thread()

    def __enter__(self) -> StopWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2.0)
