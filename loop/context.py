"""Context assembly: replay (bounded) → window → projection, with a per-process cache so a long
session reads and converts only its new rows each turn (the replay stays bounded by REPLAY_CAP).

The window starts at the latest compaction row, then the verbatim tail it kept, then every row after
it (:func:`loop.projection.arrange_window`). Each entry carries its size in bytes (the request cap)
and in tokens (compaction pressure), both counted once per row.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loop.compaction.policy import WindowItem
from loop.compaction.tokens import message_tokens
from loop.dispatch import message_size
from loop.events import EventKind
from loop.masking import mask_text, withhold_credentials
from loop.projection import EventRow, Folder, ProjectionError, arrange_window, tail_first_seq
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
    tokens: int
    opened: tuple[str, ...]


class WindowView:
    """The projected window of one narrative: messages, their size in bytes and tokens, and the
    rows behind them (what compaction plans over; built only when asked for)."""

    __slots__ = ("_entries", "messages", "rows", "size", "tokens")

    def __init__(self, entries: tuple[_Entry, ...], *, size: int, tokens: int) -> None:
        self._entries = entries
        self.messages = tuple(e.message for e in entries if e.message is not None)
        self.rows = len(entries)
        self.size = size
        self.tokens = tokens

    @property
    def items(self) -> tuple[WindowItem, ...]:
        return tuple(WindowItem(e.row, e.tokens, e.message) for e in self._entries)


@dataclass
class _Window:
    """One narrative's projected window, kept between turns: each turn folds only its new rows and
    drops old ones from the front at a user row, so the cost per turn does not grow with history."""

    mask: Callable[[str], str]
    guard: Detector
    entries: deque[_Entry] = field(default_factory=deque)
    folder: Folder | None = None
    last_seq: int = 0
    session_stamp: Any = None  # the session row's created_at: the same id may name another session later
    size: int = 0
    tokens: int = 0

    def reset(self) -> None:
        self.entries.clear()
        self.folder = Folder(self.mask, guard=self.guard)
        self.size = 0
        self.tokens = 0

    def feed(self, rows: list[EventRow]) -> None:
        if self.folder is None:
            self.reset()
        for row in rows:
            if row.kind == EventKind.COMPACTION:  # a new boundary: the window restarts at it
                keep_from = tail_first_seq(row)
                kept = [entry.row for entry in self.entries if entry.row.seq >= keep_from]
                self.reset()
                self._add(row)
                for tail_row in kept:
                    self._add(tail_row)
            else:
                self._add(row)
            self.last_seq = max(self.last_seq, row.seq)  # a tail row follows its compaction row

    def _add(self, row: EventRow) -> None:
        assert self.folder is not None
        message, opened = self.folder.add(row, first=not self.entries)
        size = message_size(message) if message is not None else 0
        tokens = message_tokens(message) if message is not None else 0
        self.entries.append(_Entry(row, message, size, tokens, opened))
        self.size += size
        self.tokens += tokens

    def trim(self, cap: int) -> None:
        """Keep at most ``cap`` rows, starting at a user row (a tool group is never split)."""
        assert self.folder is not None
        cut = len(self.entries) > cap
        while len(self.entries) > cap or (cut and self.entries and self.entries[0].row.kind != EventKind.USER):
            dropped = self.entries.popleft()
            self.size -= dropped.size
            self.tokens -= dropped.tokens
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
        """The messages of the replay window and their size in bytes."""
        view = self.view(store, session_id, narrative=narrative, cap=cap, guard=guard)
        return view.messages, view.size

    def view(self, store: Store, session_id: int, *, narrative: str, cap: int,
             guard: Detector | None = None) -> WindowView:
        """The replay window of ``narrative``, brought up to date with the store.

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
            if window.folder is None:
                replay = store.compactions.replay_window(session_id, narrative=narrative, cap=cap)
            else:
                replay = store.replay(session_id, narrative=narrative, cap=cap, after_seq=window.last_seq)
                if (replay.capped or replay.session_stamp != window.session_stamp
                        or any(row.kind == EventKind.COMPACTION for row in replay.rows)):
                    # More new rows than the cap, a new boundary, or another session under this id
                    # (deleted, its id handed out again): start over from the store.
                    replay = store.compactions.replay_window(session_id, narrative=narrative, cap=cap)
                    window.folder = None
            new_rows = replay.rows
            if window.folder is None:  # a first look
                window.reset()
                window.last_seq = 0
                window.session_stamp = replay.session_stamp
                new_rows = arrange_window(new_rows, capped=replay.capped)
            window.feed(new_rows)
            window.trim(cap)
            assert window.folder is not None
            window.folder.close()
        except ProjectionError:
            self.forget(session_id)
            raise
        return WindowView(tuple(window.entries), size=window.size, tokens=window.tokens)

    def forget(self, session_id: int) -> None:
        with self._lock:
            for key in [k for k in self._windows if k[0] == session_id]:
                del self._windows[key]


DEFAULT_CONTEXT = ContextBuilder()
