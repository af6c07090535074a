"""The kernel's EventBus over the Channels layer.

The durable session-event log is the source of truth for streams; the channel layer only wakes
consumers (and carries live turn deltas where the layer crosses processes, e.g. Redis). A
consumer that misses a wake still polls the log, so nothing durable depends on this path.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


class ChannelsBus:
    def _send(self, session_id: int, message: dict[str, Any]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(session_group(session_id), message)
        except Exception:
            logger.debug("channel layer send failed", exc_info=True)

    def committed(self, session_id: int, last_seq: int) -> None:
        self._send(session_id, {"type": "session.wake", "last_seq": last_seq})

    def delta(self, session_id: int, payload: Mapping[str, Any]) -> None:
        self._send(session_id, {"type": "session.delta", "payload": dict(payload)})
