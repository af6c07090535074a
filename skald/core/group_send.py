"""Fire-and-forget channel-layer sends from any thread, sync or async.

Nothing durable travels this way (streams read the session-event log; live pages re-read what they
show), so a send is never a blocking hop on a request or a turn: inside a running event loop it is
scheduled there, elsewhere on one background loop per process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


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


def submit(coroutine: Coroutine[Any, Any, None]) -> None:
    """Run ``coroutine`` soon without waiting for it: on the running loop if there is one."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:  # inside daphne or a consumer: schedule on the serving loop
        running.create_task(coroutine).add_done_callback(_log_failure)
        return
    asyncio.run_coroutine_threadsafe(coroutine, _background_loop()).add_done_callback(_log_failure)


def group_send_soon(group: str, message: dict[str, Any]) -> None:
    """``group_send`` on the default layer, without waiting; nothing happens with no layer.

    The embedded layer in a process without consumers of its own (a worker) sends its datagrams
    right here (``group_send_now``): no hop to the background loop's thread on the turn's path.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    send_now = getattr(layer, "group_send_now", None)
    if send_now is not None and send_now(group, message):
        return
    submit(layer.group_send(group, message))
