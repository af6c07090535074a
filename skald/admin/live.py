"""The admin's live-pages websocket: ``ws/admin/live/?topics=approvals,proposals``.

A page that shows a queue or a home opens one socket and names the topics it shows; each committed
change announces its topic (``skald.core.live``) and the socket forwards ``{"type": "changed",
"topic", "kind"}``, on which the page re-reads its fragment. Notices carry no data, and a viewer
joins only the topics whose pages it may open.

Refusals (accepted, then closed at once with the code, :mod:`skald.core.websocket`): 4401 not a
signed-in staff user, 4400 an unknown topic, 4403 none of the topics is the viewer's to see.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async

from skald.core.live import LIVE_TOPICS, live_group, live_topic_allowed
from skald.core.websocket import RefusingConsumer


class AdminLiveConsumer(RefusingConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_active or not user.is_staff:
            await self.refuse(4401)
            return
        query = parse_qs(self.scope.get("query_string", b"").decode())
        asked = {topic for raw in query.get("topics", []) for topic in raw.split(",") if topic}
        if not asked or not asked <= LIVE_TOPICS.keys():
            await self.refuse(4400)
            return
        allowed = await database_sync_to_async(
            lambda: sorted(topic for topic in asked if live_topic_allowed(user, topic)))()
        if not allowed:
            await self.refuse(4403)
            return
        self.groups_joined = [live_group(topic) for topic in allowed]
        await self.accept()
        for group in self.groups_joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.send_json({"type": "joined", "topics": allowed})

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def live_changed(self, message: dict[str, Any]) -> None:
        await self.send_json({"type": "changed", "topic": message["topic"], "kind": message.get("kind", "")})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        await self.send_json({"type": "error", "code": "unknown_message", "message": "this socket only listens"})
