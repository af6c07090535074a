"""The kernel's EventBus over the Channels layer.

The durable session-event log is the source of truth for streams; the channel layer only wakes
consumers (and carries live turn deltas where the layer crosses processes, e.g. Redis). A consumer
that misses a wake still polls the log, so nothing durable depends on this path — which is why
sends are fire-and-forget on one background event loop per process, never a blocking hop on the
turn's hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skald.core.group_send import group_send_soon


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


class ChannelsBus:
    def _send(self, session_id: int, message: dict[str, Any]) -> None:
        group_send_soon(session_group(session_id), message)

    def committed(self, session_id: int, last_seq: int) -> None:
        self._send(session_id, {"type": "session.wake", "last_seq": last_seq})

    def delta(self, session_id: int, payload: Mapping[str, Any]) -> None:
        self._send(session_id, {"type": "session.delta", "payload": dict(payload)})
