"""Revocation: a user's tokens stop working at once and their websockets close.

Triggered by signing out (admin/console logout, ``POST /api/auth/sign-out/``: the sign-out signal in
``skald.identity.receivers``), and called by the services that deactivate a user or take their last
role (``skald.identity.users``, ``skald.identity.provider_users``) inside their own transaction. In one
transaction: the token version moves on (access tokens refused by ``tokens``), every outstanding
refresh token is blacklisted (simplejwt's blacklist, checked on refresh), and the audit row. After
commit the channel layer tells each of the user's websocket consumers, in any process, to close.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from django.db.models import F
from rest_framework_simplejwt.token_blacklist.models import BlacklistedToken, OutstandingToken

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.core import clock
from skald.identity.models import TokenRevocation

logger = logging.getLogger(__name__)

CLOSE_MESSAGE = "identity.revoked"


def user_group(user_id: Any) -> str:
    """The channel-layer group every websocket of a user joins."""
    return f"identity.user.{user_id}"


def sockets_close(user_id: Any) -> None:
    """Ask every consumer of ``user_id`` (any process sharing the channel layer) to close."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(user_group(user_id), {"type": CLOSE_MESSAGE})
    except Exception:  # a lost wake must not fail the revocation; the consumer rechecks on its poll
        logger.exception("could not tell user %s's websockets to close", user_id)


def tokens_revoke(*, user: Any, reason: str, actor: Actor, kind: AuditKind = AuditKind.TOKENS_REVOKED,
                  detail: dict[str, Any] | None = None) -> int:
    """Revoke every token of ``user``; returns how many refresh tokens were blacklisted."""
    with transaction.atomic():
        now = clock.now()
        state, created = TokenRevocation.objects.get_or_create(
            user_id=user.pk, defaults={"version": 1, "revoked_at": now, "reason": reason})
        if not created:
            TokenRevocation.objects.filter(pk=state.pk).update(version=F("version") + 1, revoked_at=now, reason=reason)
        live = list(OutstandingToken.objects.filter(user_id=user.pk, blacklistedtoken__isnull=True))
        BlacklistedToken.objects.bulk_create([BlacklistedToken(token=token) for token in live], ignore_conflicts=True)
        audit_append(actor=actor, kind=kind, subject_type="identity.account", subject_id=user.get_username()[:64],
                     payload={"user_id": user.pk, "reason": reason, "refresh_tokens": len(live), **(detail or {})})
        user_id = user.pk
        transaction.on_commit(lambda: sockets_close(user_id))
    return len(live)
