"""Identity state kept per user."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from skald.core.roles import Role


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


class ProviderIdentity(models.Model):
    """The identity provider's account behind a Skald user: ``(issuer, sub)`` is the only match key
    (never an e-mail or a user name, so a provider account cannot take over a local one)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    last_groups = models.JSONField(default=list, blank=True, help_text="The provider groups of the last sign-in.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="provider_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} @ {self.issuer}"


class ProviderGroupMapping(models.Model):
    """A provider group (the ``groups`` claim) → a Skald role and/or a security group.

    At each sign-in through the provider a user's roles become exactly the roles their groups map
    to; security groups named by some mapping follow the same way (others are left as they are)."""

    provider_group = models.CharField(max_length=200, help_text="A value of the provider's groups claim.")
    role = models.CharField(max_length=16, blank=True, choices=[(role.value, role.value) for role in Role])
    security_group = models.ForeignKey("approvals.SecurityGroup", null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="provider_mappings")

    class Meta:
        ordering = ["provider_group", "role"]
        constraints = [
            models.CheckConstraint(condition=~models.Q(role="") | models.Q(security_group__isnull=False),
                                   name="provider_mapping_names_a_target"),
            models.UniqueConstraint(fields=["provider_group", "role", "security_group"],
                                    name="provider_mapping_unique"),
        ]

    def __str__(self) -> str:
        targets = [t for t in (self.role, self.security_group and f"security group {self.security_group}") if t]
        return f"{self.provider_group} → {', '.join(targets)}"
