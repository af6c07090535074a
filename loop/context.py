"""Context assembly: replay (bounded) → window → projection, with a per-process cache so a long
session reads and converts only its new rows each turn (the replay stays bounded by REPLAY_CAP)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from loop.masking import find_tripwires, mask_text
from loop.projection import EventRow, project, window_start
from loop.providers.base import Message
from loop.store import Store

_CACHE_SESSIONS = 256


def mask_for_provider(text: str) -> str:
    """PII masked; content matching a credential tripwire is withheld (SPEC L16)."""
    markers = find_tripwires(text)
    if markers:
        return f"[content withheld: it matched credential markers ({', '.join(markers)})]"
    return mask_text(text).text


@dataclass
class _Window:
    rows: list[EventRow] = field(default_factory=list)
    capped: bool = False
    last_seq: int = 0
    memo: dict[int, tuple[Any, Message]] = field(default_factory=dict)


class ContextBuilder:
    """Builds the messages for a narrative; safe to share between drivers of different sessions."""

    def __init__(self) -> None:
        self._windows: OrderedDict[tuple[int, str], _Window] = OrderedDict()
        self._lock = threading.Lock()

    def messages(self, store: Store, session_id: int, *, narrative: str, cap: int) -> tuple[Message, ...]:
        key = (session_id, narrative)
        with self._lock:
            window = self._windows.pop(key, None) or _Window()
            self._windows[key] = window
            while len(self._windows) > _CACHE_SESSIONS:
                self._windows.popitem(last=False)
        new_rows, capped = store.replay(session_id, narrative=narrative, cap=cap, after_seq=window.last_seq)
        if capped:
            window.rows, window.capped, window.memo = new_rows, True, {}
        else:
            window.rows.extend(new_rows)
        if len(window.rows) > cap:
            dropped = window.rows[: len(window.rows) - cap]
            window.rows = window.rows[len(dropped):]
            window.capped = True
            for row in dropped:
                window.memo.pop(row.seq, None)
        if window.rows:
            window.last_seq = window.rows[-1].seq
        start = window_start(window.rows, capped=window.capped)
        if start:
            for row in window.rows[:start]:
                window.memo.pop(row.seq, None)
            window.rows = window.rows[start:]
        return project(window.rows, mask=mask_for_provider, memo=window.memo)

    def forget(self, session_id: int) -> None:
        with self._lock:
            for key in [k for k in self._windows if k[0] == session_id]:
                del self._windows[key]


DEFAULT_CONTEXT = ContextBuilder()
