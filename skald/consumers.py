"""The session websocket: ``ws/sessions/{id}/?after=<seq>``.

The session-event log is the source of truth: one pump task sends every stored event with a seq
above the last one sent, exactly once and in order; channel-layer wakes only make it look sooner,
and a poll catches what a wake missed (e.g. a worker in another process with the in-memory layer).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from approvals.pending.services import pending_approval_resolve
from skald.core.errors import SkaldError
from skald.core.websocket import RefusingConsumer
from skald.identity.revocation import user_group
from skald.identity.tokens import token_is_current
from skald.loop_adapters.bus import session_group
from skald.loop_adapters.translate import translate_delta, translate_event
from skald.sessions import selectors
from skald.sessions.access import SessionAction, may, may_use_sessions, session_for
from skald.sessions.services import session_wake

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.5
PAGE = 200


@database_sync_to_async
def _jwt_user(token: str) -> Any:
    from rest_framework_simplejwt.exceptions import TokenError
    from rest_framework_simplejwt.tokens import AccessToken

    try:
        access = AccessToken(token)  # type: ignore[arg-type]
        user_id = access["user_id"]
    except (TokenError, KeyError):
        return None
    if not token_is_current(access, user_id):  # issued before a sign-out or revocation
        return None
    return get_user_model().objects.filter(pk=user_id, is_active=True).first()


@database_sync_to_async
def _still_admitted(user: Any) -> bool:
    """The user is active, still has a session role, and no revocation happened since connect."""
    fresh = get_user_model().objects.filter(pk=user.pk, is_active=True).first()
    return fresh is not None and may_use_sessions(fresh)


class SessionConsumer(RefusingConsumer):
    """Refusals (accepted, then closed at once with the code, :mod:`skald.core.websocket`): 4400
    malformed ``after``, 4401 no valid credential, 4403 no role, 4404 no such session for this user.
    Later: 1011 the stream failed (reconnect with ``after=``); 4401 the user's tokens were revoked
    (sign-out, deactivation, last role removed). The socket acts only on its own session: an
    ``approval.resolve`` for another session's call is refused (``approval_not_found``)."""

    RECHECK_POLLS = 10  # besides the revocation message, the user is rechecked every ~5 s

    async def connect(self) -> None:
        query = parse_qs(self.scope.get("query_string", b"").decode())
        user = self.scope.get("user") or AnonymousUser()
        token = (query.get("token") or [""])[0]
        if token:
            user = await _jwt_user(token)
        if user is None or not user.is_authenticated:
            await self.refuse(4401)
            return
        if not await database_sync_to_async(may_use_sessions)(user):
            await self.refuse(4403)
            return
        try:
            after = int((query.get("after") or ["0"])[0])
            if after >= 2**63:
                raise ValueError("after is beyond any sequence")
        except ValueError:
            await self.refuse(4400)
            return
        try:
            self.session = await database_sync_to_async(session_for)(
                user=user, session_id=int(self.scope["url_route"]["kwargs"]["session_id"]), action=SessionAction.READ
            )
        except SkaldError:
            await self.refuse(4404)
            return
        self.user = user
        self.last_seq = max(0, after)
        self.wake = asyncio.Event()
        self.group = session_group(self.session.pk)
        await self.accept()
        if self.channel_layer is not None:
            await self.channel_layer.group_add(self.group, self.channel_name)
            await self.channel_layer.group_add(user_group(user.pk), self.channel_name)
        self.pump = asyncio.create_task(self._pump())
        # A session whose worker died resumes when someone looks at it (SPEC R3 recover_turn).
        await database_sync_to_async(session_wake)(session=self.session)

    async def disconnect(self, code: int) -> None:
        pump = getattr(self, "pump", None)
        if pump is not None:
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
        if getattr(self, "group", None) and self.channel_layer is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            await self.channel_layer.group_discard(user_group(self.user.pk), self.channel_name)

    async def _pump(self) -> None:
        polls = 0
        try:
            while True:
                await self._send_new()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), POLL_SECONDS)
                self.wake.clear()
                polls += 1
                if polls % self.RECHECK_POLLS == 0 and not await _still_admitted(self.user):
                    await self.close(code=4401)
                    return
        except Exception:
            # A silent dead pump would leave the client waiting forever; closing makes it resume.
            logger.exception("session %s stream failed after seq %s", self.session.pk, self.last_seq)
            await self.close(code=1011)

    async def _send_new(self) -> None:
        while True:
            events = await database_sync_to_async(selectors.events_after)(
                session=self.session, after=self.last_seq, limit=PAGE
            )
            for event in events:
                await self.send_json(translate_event(event))
                self.last_seq = event.seq
            if len(events) < PAGE:
                return

    async def session_wake(self, message: dict[str, Any]) -> None:
        self.wake.set()

    async def identity_revoked(self, message: dict[str, Any]) -> None:
        """The user's tokens were revoked (``skald.identity.revocation``): the stream ends now."""
        await self.close(code=4401)

    async def session_delta(self, message: dict[str, Any]) -> None:
        await self.send_json(translate_delta(message["payload"]))

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "stop":
            from skald.sessions.services import session_stop

            # The same rule as REST's stop route: readers who may not stop get a refusal frame.
            if not await database_sync_to_async(may)(self.user, SessionAction.STOP, self.session):
                await self.send_json({"type": "error", "code": "session_stop_forbidden",
                                      "message": "Only the session's owner or an operator may stop it."})
                return
            await database_sync_to_async(session_stop)(user=self.user, session=self.session)
            await self.send_json({"type": "stop.accepted"})
            return
        if kind == "approval.resolve":
            await self._resolve(content)
            return
        await self.send_json({"type": "error", "code": "unknown_message", "message": f"unknown type {kind!r}"})

    async def _resolve(self, content: dict[str, Any]) -> None:
        try:
            approval = await database_sync_to_async(pending_approval_resolve)(
                resolver=self.user, request_id=content.get("request_id"), decision=str(content.get("decision")),
                reason=str(content.get("reason") or ""), session_id=self.session.pk,
                provenance_acknowledged=content.get("provenance_acknowledged") is True,
            )
        except SkaldError as exc:
            await self.send_json({"type": "error", "code": exc.code, "message": exc.message,
                                  "request_id": content.get("request_id")})
            return
        await self.send_json({"type": "approval.accepted", "request_id": str(approval.request_id),
                              "status": approval.status})
