"""Identity state kept per user."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class TokenRevocation(models.Model):
    """A user's token version: every JWT carries the version it was issued under (claim ``tv``,
    absent = 0) and is refused once the version moved past it (sign-out, deactivation, last role
    removed). Refresh tokens are also blacklisted at the same moment (simplejwt's blacklist)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True,
                                related_name="token_revocation")
    version = models.PositiveIntegerField(default=0)
    revoked_at = models.DateTimeField()
    reason = models.CharField(max_length=32)

    def __str__(self) -> str:
        return f"user {self.user_id}: version {self.version} ({self.reason})"
