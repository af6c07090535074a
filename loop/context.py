"""Context assembly: replay (bounded) → window → projection, with a per-process cache so a long
session reads and converts only its new rows each turn (the replay stays bounded by REPLAY_CAP)."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from loop.dispatch import message_size
from loop.events import EventKind
from loop.masking import mask_text, withhold_credentials
from loop.projection import EventRow, Folder, ProjectionError, window_start
from loop.providers.base import Message
from loop.store import Store
from loop.tripwires import Detector, default_detector

_CACHE_SESSIONS = 256


def mask_for_provider(text: str) -> str:
    """PII masked; content matching a credential tripwire is withheld (SPEC L16)."""
    withheld = withhold_credentials(text)
    return withheld if withheld is not text else mask_text(text).text


def mask_pii(text: str) -> str:
    """PII masked (the projection's guard has already withheld credentials)."""
    return mask_text(text).text


@dataclass
class _Entry:
    row: EventRow
    message: Message | None
    size: int
    opened: tuple[str, ...]


@dataclass
class _Window:
    """One narrative's projected window, kept between turns: each turn folds only its new rows and
    drops old ones from the front at a user row, so the cost per turn does not grow with history."""

    mask: Callable[[str], str]
    guard: Detector
    entries: deque[_Entry] = field(default_factory=deque)
    folder: Folder | None = None
    last_seq: int = 0
    size: int = 0

    def reset(self) -> None:
        self.entries.clear()
        self.folder = Folder(self.mask, guard=self.guard)
        self.size = 0

    def feed(self, rows: list[EventRow]) -> None:
        if self.folder is None:
            self.reset()
        assert self.folder is not None
        for row in rows:
            if row.kind == EventKind.COMPACTION:  # a new boundary: the window restarts at it
                self.reset()
            message, opened = self.folder.add(row, first=not self.entries)
            size = message_size(message) if message is not None else 0
            self.entries.append(_Entry(row, message, size, opened))
            self.size += size
            self.last_seq = row.seq

    def trim(self, cap: int) -> None:
        """Keep at most ``cap`` rows, starting at a user row (a tool group is never split)."""
        assert self.folder is not None
        cut = len(self.entries) > cap
        while len(self.entries) > cap or (cut and self.entries and self.entries[0].row.kind != EventKind.USER):
            dropped = self.entries.popleft()
            self.size -= dropped.size
            self.folder.seen.difference_update(dropped.opened)
        if cut and not self.entries:
            raise ProjectionError("the replay window holds no user row to start from", code="replay_window_unbounded")


class ContextBuilder:
    """Builds the messages for a narrative; safe to share between drivers of different sessions."""

    def __init__(self, mask: Callable[[str], str] = mask_pii) -> None:
        self.mask = mask
        self._windows: OrderedDict[tuple[int, str], _Window] = OrderedDict()
        self._lock = threading.Lock()

    def messages(self, store: Store, session_id: int, *, narrative: str, cap: int,
                 guard: Detector | None = None) -> tuple[Message, ...]:
        return self.window(store, session_id, narrative=narrative, cap=cap, guard=guard)[0]

    def window(self, store: Store, session_id: int, *, narrative: str, cap: int,
               guard: Detector | None = None) -> tuple[tuple[Message, ...], int]:
        """The messages of the replay window and their size in bytes.

        ``guard`` is the credential detector (the vendored rule set when None). A window folded
        under another rule set (an organisation pattern was added) is folded again.
        """
        guard = guard or default_detector()
        key = (session_id, narrative)
        with self._lock:
            window = self._windows.pop(key, None)
            if window is None or window.guard.fingerprint != guard.fingerprint:
                window = _Window(self.mask, guard)
            self._windows[key] = window
            while len(self._windows) > _CACHE_SESSIONS:
                self._windows.popitem(last=False)
        try:
            new_rows, capped = store.replay(session_id, narrative=narrative, cap=cap, after_seq=window.last_seq)
            if capped or window.folder is None:  # a first look, or more new rows than the cap
                window.reset()
                if capped:
                    new_rows = new_rows[window_start(new_rows, capped=True):]
            window.feed(new_rows)
            window.trim(cap)
            assert window.folder is not None
            window.folder.close()
        except ProjectionError:
            self.forget(session_id)
            raise
        return tuple(e.message for e in window.entries if e.message is not None), window.size

    def forget(self, session_id: int) -> None:
        with self._lock:
            for key in [k for k in self._windows if k[0] == session_id]:
                del self._windows[key]


DEFAULT_CONTEXT = ContextBuilder()
