"""Refusing a websocket so that the client can tell why.

A consumer that closes before it accepts makes the server answer the handshake with HTTP 403: every
refusal then looks alike, and a browser's ``CloseEvent.code`` is 1006. Skald's sockets accept first
and close at once with their documented code (4400 bad query, 4401 no valid credential, 4403 no role,
4404 no such session), so clients can react: sign in again, give up, or fix the request.
"""

from __future__ import annotations

from channels.generic.websocket import AsyncJsonWebsocketConsumer


class RefusingConsumer(AsyncJsonWebsocketConsumer):
    """A JSON consumer whose refusals reach the client as close codes."""

    async def refuse(self, code: int) -> None:
        """Accept, then close with ``code``: nothing is sent or joined in between."""
        await self.accept()
        await self.close(code=code)
