"""Tool discovery (SPEC A5): every tool offered to a model becomes a known tool, off the hot path
(an in-memory seen-set guards the database write)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from loop.providers.base import ToolSpec
from skald.plugins import notify_tools_offered

_seen: set[str] = set()
_lock = threading.Lock()


class KnownToolRecorder:
    def offered(self, specs: Sequence[ToolSpec]) -> None:
        with _lock:
            fresh = [s for s in specs if s.name not in _seen]
            _seen.update(s.name for s in fresh)
        if fresh:
            notify_tools_offered(fresh)


def forget_seen() -> None:
    """Tests reset the in-memory guard between databases."""
    with _lock:
        _seen.clear()
