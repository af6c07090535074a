"""Lockouts: the one answer a locked entrance gives, and lifting a lockout (an admin's act, audited).

django-axes keeps the failure counters (``AccessAttempt`` rows, in the database so every process
sees them) and refuses a locked account or address before any password is checked. The answer is
the same whichever of the name or the password was wrong, and whether the account exists at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from axes.models import AccessAttempt
from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.html import escape

from audit.actors import Actor
from skald.identity import signins

LOCKED_CODE = "sign_in_locked"
LOCKED_STATUS = 429
LOCKED_MESSAGE = ("Sign-in is locked after too many failed attempts. "
                  "An administrator must lift the lock before this account or address can sign in.")


def locked_json() -> JsonResponse:
    return JsonResponse({"code": LOCKED_CODE, "message": LOCKED_MESSAGE, "extra": {}},
                        status=LOCKED_STATUS)


def lockout_response(request: HttpRequest, original_response: Any = None, credentials: Any = None) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: JSON under the API prefixes, a plain page for the admin and console."""
    if request.path.startswith(tuple(settings.SKALD_API_PREFIXES)):
        return locked_json()
    body = (f"<!doctype html><title>Sign-in locked</title><h1>Sign-in locked</h1>"
            f"<p id=\"sign-in-locked\">{escape(LOCKED_MESSAGE)}</p>")
    return HttpResponse(body, status=LOCKED_STATUS)


def lockout_lift(*, actor: Actor, attempts: Iterable[AccessAttempt]) -> int:
    """Forget the failures of ``attempts`` (one audit row each); returns how many were lifted."""
    lifted = 0
    with transaction.atomic():
        for attempt in attempts:
            signins.lockout_lift_record(actor=actor, username=attempt.username or "",
                                        address=attempt.ip_address or "")
            attempt.delete()
            lifted += 1
    return lifted

