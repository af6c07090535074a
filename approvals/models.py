"""Approval policy and durable approvals."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class RuleAction(models.TextChoices):
    ALLOW = "allow"
    DENY = "deny"
    REQUIRE = "require"


class SecurityGroup(models.Model):
    """A set of rules that applies to its member users and agents."""

    name = models.CharField(max_length=80, unique=True)
    description = models.TextField(blank=True)
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="security_groups")
    agents = models.ManyToManyField("skald.Agent", blank=True, related_name="security_groups")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApprovalRule(models.Model):
    """``tool_pattern`` is a glob over tool names; ``arg_matchers`` maps argument paths to globs."""

    group = models.ForeignKey(
        SecurityGroup, null=True, blank=True, on_delete=models.CASCADE, related_name="rules",
        help_text="Empty: a global rule.",
    )
    tool_pattern = models.CharField(max_length=128)
    arg_matchers = models.JSONField(default=dict, blank=True)
    action = models.CharField(max_length=8, choices=RuleAction.choices)
    priority = models.PositiveIntegerField(default=1000, help_text="Lower runs first.")
    approval_ttl = models.DurationField(null=True, blank=True, help_text="Expiry of the approvals it raises.")
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=200, blank=True)
    hit_count = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["priority", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.tool_pattern} @{self.priority}"


class ToolCategory(models.TextChoices):
    REGISTRY = "registry"
    INTERFACE = "interface"
    DYNAMIC = "dynamic"
    MCP = "mcp"


class KnownTool(models.Model):
    """Every tool ever offered to a model, so that every tool can be gated (SPEC A5)."""

    name = models.CharField(max_length=128, unique=True)
    category = models.CharField(max_length=16, choices=ToolCategory.choices, default=ToolCategory.DYNAMIC)
    description = models.TextField(blank=True)
    server = models.CharField(max_length=40, blank=True, help_text="mcp: the server that offers it.")
    input_schema = models.JSONField(default=dict, blank=True)
    annotations = models.JSONField(default=dict, blank=True, help_text="mcp: the pinned annotations.")
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class PendingApproval(models.Model):
    """A parked tool call waiting for a human. Single-use: resolved once, by one service."""

    request_id = models.UUIDField(unique=True)
    tool_call = models.OneToOneField("loop.ToolCall", on_delete=models.CASCADE, related_name="approval")
    session = models.ForeignKey("loop.Session", on_delete=models.CASCADE, related_name="approvals")
    batch = models.CharField(max_length=64, help_text="e{exchange}:t{turn}: calls parked together.")
    tool = models.CharField(max_length=128)
    args = models.JSONField(default=dict)
    args_hash = models.CharField(max_length=64)
    preview = models.TextField(blank=True)
    rule = models.ForeignKey(ApprovalRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rule_snapshot = models.JSONField(default=dict, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    expires_at = models.DateTimeField()
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    created_at = models.DateTimeField()
    # The parked call's span (W3C traceparent, loop.tracing): the decision's span links to it.
    traceparent = models.CharField(max_length=64, blank=True, default="")
    # Injection provenance (issue 30, docs/provenance.md): the call's provenance when it was made in a
    # tainted frame (sources, suspect spans, arguments from untrusted content); {} otherwise.
    provenance = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "expires_at"], name="approvals_status_expiry")]
        permissions = [("resolve_approval", "Can approve or reject parked tool calls")]

    def __str__(self) -> str:
        return f"{self.tool} ({self.status})"


class TripwirePattern(models.Model):
    """An organisation's own credential shape (SPEC L16): text it matches never reaches a provider.

    Written only through :mod:`approvals.tripwires.services` (validated, audited).
    """

    name = models.SlugField(max_length=60, unique=True, help_text="The kind a refusal names: org:<name>.")
    regex = models.CharField(max_length=500, help_text="A Python regular expression (ASCII classes).")
    keywords = models.CharField(
        max_length=200, blank=True,
        help_text="Comma-separated lowercase words the text must contain for the pattern to run "
                  "(cheaper on long texts). Empty: it runs on every text.",
    )
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"org:{self.name}"

    @property
    def keyword_list(self) -> tuple[str, ...]:
        return tuple(word.strip().lower() for word in self.keywords.split(",") if word.strip())


class TripwireAllowEntry(models.Model):
    """A known-benign pattern: a finding whose matched text contains a match of it is not refused."""

    regex = models.CharField(max_length=500, help_text="A Python regular expression (ASCII classes).")
    reason = models.CharField(max_length=300, help_text="Why this is not a credential (kept in the audit log).")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["id"]
        verbose_name = "tripwire allow-list entry"
        verbose_name_plural = "tripwire allow-list entries"

    def __str__(self) -> str:
        return self.regex
