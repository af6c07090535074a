"""The sign-in form of the admin and the console: warns a person near a lockout (issue 35).

django-axes counts the failure while the form authenticates (``request.axes_failures_since_start``,
the count the nearer counter leaves, see :mod:`skald.identity.lockout`); once few attempts remain,
the refusal says how many, the same for a wrong name as for a wrong password.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from skald.identity.lockout import WARN_WITHIN


class SkaldAuthenticationForm(AdminAuthenticationForm):
    def get_invalid_login_error(self) -> ValidationError:
        refusal = super().get_invalid_login_error()
        failures = int(getattr(self.request, "axes_failures_since_start", 0) or 0)
        left = settings.AXES_FAILURE_LIMIT - failures
        if 0 < left <= WARN_WITHIN:
            attempts = "attempt" if left == 1 else "attempts"
            return ValidationError(
                [refusal, ValidationError(
                    f"{left} {attempts} left: after that, sign-in to this account from here is locked until an "
                    "administrator lifts it.", code="lockout_near")])
        return refusal
