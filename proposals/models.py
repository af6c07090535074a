"""Proposals (pending until a reviewer disposes) and versioned knowledge entries."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ProposalStatus(models.TextChoices):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


class KnowledgeEntry(models.Model):
    """Accepted knowledge: what later runs can read. ``version`` grows with every accepted revision."""

    slug = models.SlugField(max_length=120, unique=True)
    title = models.CharField(max_length=200)
    body = models.TextField()
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["title"]
        verbose_name_plural = "knowledge entries"

    def __str__(self) -> str:
        return f"{self.title} (v{self.version})"


class Proposal(models.Model):
    run = models.ForeignKey("skald.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="proposals")
    session = models.ForeignKey("loop.Session", on_delete=models.CASCADE, related_name="proposals")
    title = models.CharField(max_length=200)
    body = models.TextField()
    evidence = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.PENDING)
    source_key = models.CharField(max_length=200, unique=True, help_text="Idempotency of capture.")
    disposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    disposed_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    knowledge_entry = models.ForeignKey(
        KnowledgeEntry, null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        permissions = [("dispose_proposal", "Can accept or reject proposals")]
        indexes = [models.Index(fields=["status", "id"], name="proposals_proposal_queue")]
        constraints = [
            # A disposal is a whole fact: status and time change together (SPEC Q2).
            models.CheckConstraint(
                condition=(
                    models.Q(status=ProposalStatus.PENDING, disposed_at__isnull=True)
                    | (~models.Q(status=ProposalStatus.PENDING) & models.Q(disposed_at__isnull=False))
                ),
                name="proposals_proposal_disposed_iff_not_pending",
            ),
            # A rejection without a reason is not actionable for whoever proposed it.
            models.CheckConstraint(
                condition=~models.Q(status=ProposalStatus.REJECTED) | ~models.Q(reason=""),
                name="proposals_proposal_rejection_has_reason",
            ),
        ]

    def __str__(self) -> str:
        return self.title


class KnowledgeRevision(models.Model):
    """The history of a knowledge entry: one row per accepted version."""

    entry = models.ForeignKey(KnowledgeEntry, on_delete=models.CASCADE, related_name="revisions")
    version = models.PositiveIntegerField()
    title = models.CharField(max_length=200)
    body = models.TextField()
    proposal = models.ForeignKey(Proposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["entry_id", "-version"]
        constraints = [models.UniqueConstraint(fields=["entry", "version"], name="proposals_revision_unique")]

    def __str__(self) -> str:
        return f"{self.title} v{self.version}"
