"""Audit rows and recorded chain heads. Written only by :func:`audit.services.audit_append`."""

from __future__ import annotations

from django.db import models

from audit.kinds import AuditKind


class ActorType(models.TextChoices):
    USER = "user"
    SYSTEM = "system"
    AGENT = "agent"


class AuditEvent(models.Model):
    """One link of the chain: ``hash`` = SHA-256 over the canonical bytes of every field + ``prev_hash``.

    ``payload`` holds canonical JSON text (not a JSON column) so the hashed bytes are exactly the
    stored bytes on every database.
    """

    seq = models.PositiveBigIntegerField(unique=True)
    time = models.DateTimeField()
    actor_type = models.CharField(max_length=8, choices=ActorType.choices)
    actor_id = models.CharField(max_length=64)
    kind = models.PositiveIntegerField(choices=AuditKind.choices)
    subject_type = models.CharField(max_length=64)
    subject_id = models.CharField(max_length=64)
    payload = models.TextField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["seq"]
        indexes = [models.Index(fields=["subject_type", "subject_id"], name="audit_subject")]

    def __str__(self) -> str:
        label = AuditKind(self.kind).label if self.kind in AuditKind.values else f"unknown kind {self.kind}"
        return f"#{self.seq} {label}"


class ChainHead(models.Model):
    """A recorded head (seq + hash), optionally HMAC-signed, to detect a truncated tail."""

    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    recorded_at = models.DateTimeField()
    signature = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-seq"]

    def __str__(self) -> str:
        return f"head #{self.seq}"
