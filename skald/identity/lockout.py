"""Lockouts: what is counted, the one answer a locked entrance gives, and lifting a lockout (an
admin's act, audited).

django-axes keeps the failure counters (``AccessAttempt`` rows, in the database so every process
sees them) and refuses a locked sign-in before any password is checked. Two counters (issue 35: a
lock per address alone let one person, or an attacker behind the same NAT, lock a whole office out):

- the account from one address (``SKALD_SIGNIN_FAILURE_LIMIT``, 20): that person at that desk;
- the account from anywhere (``SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT``, 100): a guesser who changes
  addresses.

Nobody else is locked by someone's failures. The answer is the same whichever of the name or the
password was wrong, and whether the account exists at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt
from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

from audit.actors import Actor
from skald.identity import signins

LOCKED_CODE = "sign_in_locked"
LOCKED_STATUS = 429
LOCKED_MESSAGE = ("Sign-in is locked after too many failed attempts. "
                  "An administrator must lift the lock before this account can sign in from here.")
# The counters, as django-axes reads them (AXES_LOCKOUT_PARAMETERS): the pair first, then the account.
LOCKOUT_PARAMETERS: list[Any] = [["username", "ip_address"], "username"]
WARN_WITHIN = 5  # a sign-in form says how many attempts are left once this few remain


def attempts_left(pair_failures: int, account_failures: int) -> int:
    """Failures still allowed before either counter locks (negative past a lock: every attempt while
    locked counts, so the lockout's own moment, at exactly zero left, is seen once)."""
    return min(settings.AXES_FAILURE_LIMIT - pair_failures,
               settings.SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT - account_failures)


class PairThenAccountHandler(AxesDatabaseHandler):
    """``AXES_HANDLER``: axes compares one failure count with one limit (``AXES_FAILURE_LIMIT``, the
    pair's); this handler reports the count that leaves as many attempts as the nearer counter does,
    so the pair locks at its limit and the account alone at its own, higher one."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        pair, account = (attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
                         for attempts in self.get_user_attempts(request, credentials))
        return settings.AXES_FAILURE_LIMIT - attempts_left(pair, account)


def locked_scope(request: HttpRequest, credentials: Any = None) -> str:
    """``"account"`` when the account is locked from everywhere, else ``"pair"`` (from this address)."""
    username = get_client_username(request, credentials)
    account = AccessAttempt.objects.filter(username=username).aggregate(
        total=Sum("failures_since_start"))["total"] or 0
    return "account" if account >= settings.SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT else "pair"


def locked_json() -> JsonResponse:
    return JsonResponse({"code": LOCKED_CODE, "message": LOCKED_MESSAGE, "extra": {}},
                        status=LOCKED_STATUS)


def lockout_response(request: HttpRequest, original_response: Any = None, credentials: Any = None) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: JSON under the API prefixes; for the admin and console, a page in
    Skald's layout that says what is locked and how the lock is lifted."""
    if request.path.startswith(tuple(settings.SKALD_API_PREFIXES)):
        return locked_json()
    scope = locked_scope(request, credentials)
    body = render_to_string("skald/sign_in_locked.html", {
        "title": "Sign-in locked", "site_header": "Skald", "site_title": "Skald", "scope": scope,
        "username": get_client_username(request, credentials) or "",
        "pair_limit": settings.AXES_FAILURE_LIMIT, "account_limit": settings.SKALD_SIGNIN_ACCOUNT_FAILURE_LIMIT,
    }, request=request)
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

