"""Websocket test helpers: Skald refuses a socket by accepting it and closing at once with a code
(:mod:`skald.core.websocket`), so a test reads the code from the close, not from the handshake."""

from __future__ import annotations

from channels.testing import WebsocketCommunicator

WAIT = 10.0  # a hang guard, not a time assertion


async def refusal(comm: WebsocketCommunicator, timeout: float = WAIT) -> int:
    """Connect, expect the accept-then-close refusal, and return its close code."""
    connected, code = await comm.connect(timeout=timeout)
    assert connected, f"the handshake itself was refused ({code}): refusals must accept, then close"
    message = await comm.receive_output(timeout=timeout)
    assert message["type"] == "websocket.close", message
    return int(message["code"])
