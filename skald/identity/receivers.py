"""The sign-in signals, which Django and django-axes own; :func:`connect` runs once at start.

Only sign-ins are heard here. Changes to users (deactivation, roles, deletion) and what they entail
(revocation, audit) are explicit service calls in ``skald.identity.users``: no model signals.

Order matters for failures: axes' own ``user_login_failed`` receiver (connected when the ``axes``
app loads, before Skald's) has already counted the attempt and marked the request when ours runs.
"""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

from audit.actors import Actor
from audit.kinds import AuditKind
from skald.identity import signins
from skald.identity.revocation import tokens_revoke

_UID = "skald.identity"


def _on_logged_in(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    # A sign-in is recorded at the entrance it came through; a login() made outside any HTTP
    # request (the test client's force_login, a script) came through none and is not a sign-in.
    if user is None or request is None or not getattr(request, "path", ""):
        return
    method = getattr(request, "skald_sign_in_method", None) or "password"
    signins.signin_record(user=user, method=method, request=request)


def _on_login_failed(sender: Any, credentials: dict[str, Any] | None = None, request: Any = None,
                     **kwargs: Any) -> None:
    username = str((credentials or {}).get("username") or "")
    signins.signin_failure_record(username=username, method=getattr(request, "skald_sign_in_method", None)
                                  or "password", request=request,
                                  locked=bool(getattr(request, "axes_locked_out", False)))


def _on_locked_out(sender: Any, request: Any = None, username: str | None = None, ip_address: str | None = None,
                   **kwargs: Any) -> None:
    failures = int(getattr(request, "axes_failures_since_start", 0) or 0)
    if failures != settings.AXES_FAILURE_LIMIT:
        return  # axes repeats the signal for every attempt while locked; the lockout happened once
    signins.lockout_record(username=username or "", address=ip_address or "", request=request, failures=failures)


def _on_logged_out(sender: Any, request: Any = None, user: Any = None, **kwargs: Any) -> None:
    if user is None or not getattr(user, "pk", None):
        return
    tokens_revoke(user=user, reason="signed_out", actor=Actor.user(user), kind=AuditKind.SIGNED_OUT,
                  detail={"entrance": signins.entrance_of(request), "address": signins.client_address(request)})


def connect() -> None:
    """Connect every receiver (idempotent: each has a dispatch uid)."""
    user_logged_in.connect(_on_logged_in, dispatch_uid=f"{_UID}.logged_in")
    user_login_failed.connect(_on_login_failed, dispatch_uid=f"{_UID}.login_failed")
    user_locked_out.connect(_on_locked_out, dispatch_uid=f"{_UID}.locked_out")
    user_logged_out.connect(_on_logged_out, dispatch_uid=f"{_UID}.logged_out")
