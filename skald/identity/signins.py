"""The audit rows of the identity entrances: sign-ins, failures, lockouts, token refreshes, sign-outs.

Each row names the actor (the user, or for a failure the account name tried), the method
(``password``, ``oidc``, ``bearer``), the entrance (``api``, ``admin``, ``console``, ``oidc``) and
the client address, and commits on its own: a refused sign-in has no change to roll back with.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append

ACCOUNT = "identity.account"
_MAX = 64


def client_ip(request: Any) -> str:
    """``AXES_CLIENT_IP_CALLABLE``: the peer, or the address the trusted proxies appended to
    ``SKALD_CLIENT_IP_HEADER`` (``SKALD_TRUSTED_PROXY_COUNT`` from the right; what a client wrote
    further left is never believed)."""
    peer = str(request.META.get("REMOTE_ADDR", ""))
    header = settings.SKALD_CLIENT_IP_HEADER
    if not header:
        return peer
    value = str(request.META.get("HTTP_" + header.upper().replace("-", "_"), ""))
    hops = [hop.strip() for hop in value.split(",") if hop.strip()]
    count = settings.SKALD_TRUSTED_PROXY_COUNT
    return hops[-count] if len(hops) >= count else peer


def client_address(request: Any) -> str:
    """The address axes counted the attempt under (its ipware reading), else the socket's peer."""
    if request is None:
        return ""
    return str(getattr(request, "axes_ip_address", None) or request.META.get("REMOTE_ADDR", ""))


def entrance_of(request: Any) -> str:
    """Which door the attempt came through: the token endpoint, the admin or console login, OIDC."""
    if request is None:
        return "unknown"
    path = str(getattr(request, "path", ""))
    if path.startswith("/api/"):
        return "api"
    if path.startswith("/oidc/"):
        return "oidc"
    wanted = request.POST.get("next") or request.GET.get("next") or ""
    return "console" if str(wanted).startswith("/console") else "admin"


def _short(value: str) -> str:
    return (value or "?")[:_MAX]


def _append(*, actor: Actor, kind: AuditKind, subject: str, payload: dict[str, Any]) -> None:
    with transaction.atomic():
        audit_append(actor=actor, kind=kind, subject_type=ACCOUNT, subject_id=_short(subject), payload=payload)


def signin_record(*, user: Any, method: str, request: Any) -> None:
    _append(actor=Actor.user(user), kind=AuditKind.SIGNED_IN, subject=user.get_username(),
            payload={"method": method, "entrance": entrance_of(request), "address": client_address(request)})


def signin_failure_record(*, username: str, method: str, request: Any, locked: bool) -> None:
    """A refused sign-in. The row says the attempt failed, never whether the name or the secret was wrong."""
    _append(actor=Actor.system("sign-in"), kind=AuditKind.SIGN_IN_FAILED, subject=username,
            payload={"username": username[:150], "method": method, "entrance": entrance_of(request),
                     "address": client_address(request), "locked": locked})


def lockout_record(*, username: str, address: str, request: Any, failures: int) -> None:
    _append(actor=Actor.system("sign-in"), kind=AuditKind.LOCKED_OUT, subject=username,
            payload={"username": username[:150], "address": address, "entrance": entrance_of(request),
                     "failures": failures})


def lockout_lift_record(*, actor: Actor, username: str, address: str) -> None:
    _append(actor=actor, kind=AuditKind.LOCKOUT_LIFTED, subject=username,
            payload={"username": username[:150], "address": address})


def token_refresh_record(*, user: Any, request: Any) -> None:
    _append(actor=Actor.user(user), kind=AuditKind.TOKEN_REFRESHED, subject=user.get_username(),
            payload={"method": "refresh", "entrance": "api", "address": client_address(request)})
