"""Cancellation tokens (SPEC L12).

A token is minted per turn and passed down by value; delegates get ``child()`` tokens. Cancelling a
parent cancels every child; a cancelled child cancels nothing above it by itself — the parent sees
the child's ``Canceled`` outcome and stops (by construction, they share the tree).

Callbacks registered with :meth:`CancelToken.on_cancel` run once, in the cancelling thread: the
HTTP adapter closes its response there and the exec bridge kills its process group.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class CancelToken:
    """A thread-safe, sticky cancellation flag with child tokens and callbacks."""

    __slots__ = ("_callbacks", "_children", "_event", "_lock", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self._children: list[CancelToken] = []
        self.reason: str = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "stop requested") -> None:
        """Cancel this token and all its children; run callbacks once. Idempotent."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
            children = list(self._children)
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001, S110 - a failing callback must not stop the others
                pass
        for child in children:
            child.cancel(reason)

    def child(self) -> CancelToken:
        """A token cancelled whenever this one is (never the other way round)."""
        token = CancelToken()
        with self._lock:
            if not self._event.is_set():
                self._children.append(token)
                return token
        token.cancel(self.reason)
        return token

    def on_cancel(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Register ``callback``; runs at once if already cancelled. Returns an unregister function."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)

                def unregister() -> None:
                    with self._lock:
                        if callback in self._callbacks:
                            self._callbacks.remove(callback)

                return unregister
        callback()
        return lambda: None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until cancelled or ``timeout`` seconds pass; True when cancelled."""
        return self._event.wait(timeout)
