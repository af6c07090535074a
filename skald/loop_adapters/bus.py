"""The kernel's EventBus over the Channels layer.

The durable session-event log is the source of truth for streams; the channel layer only wakes
consumers (and carries live turn deltas where the layer crosses processes, e.g. Redis). A consumer
that misses a wake still polls the log, so nothing durable depends on this path — which is why
sends are fire-and-forget on one background event loop per process, never a blocking hop on the
turn's hot path.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine, Mapping
from typing import Any

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def session_group(session_id: int) -> str:
    return f"session.{session_id}"


def _background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="skald-bus", daemon=True).start()
            _loop = loop
        return _loop


def _log_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.debug("channel layer send failed: %r", future.exception())


def _submit(coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:  # inside daphne or a consumer: schedule on the serving loop
        running.create_task(coroutine).add_done_callback(_log_failure)
        return
    asyncio.run_coroutine_threadsafe(coroutine, _background_loop()).add_done_callback(_log_failure)


class ChannelsBus:
    def _send(self, session_id: int, message: dict[str, Any]) -> None:
        layer = get_channel_layer()
        if layer is None:
            return
        # The embedded layer in a process without consumers (a worker) sends its datagrams right
        # here: no hop to the background loop's thread on the turn's path.
        send_now = getattr(layer, "group_send_now", None)
        if send_now is not None and send_now(session_group(session_id), message):
            return
        _submit(layer.group_send(session_group(session_id), message))

    def committed(self, session_id: int, last_seq: int) -> None:
        self._send(session_id, {"type": "session.wake", "last_seq": last_seq})

    def delta(self, session_id: int, payload: Mapping[str, Any]) -> None:
        self._send(session_id, {"type": "session.delta", "payload": dict(payload)})
