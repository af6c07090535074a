"""MCP servers and the tools they offer, each with its pinned definition (docs/mcp.md).

Written only through :mod:`skald.mcp.services` (validated, audited). Nothing about a live server
connection is truth: these rows are, on any number of workers.
"""

from __future__ import annotations

from django.db import models


class McpTransport(models.TextChoices):
    STDIO = "stdio"
    HTTP = "http"


class McpTrust(models.TextChoices):
    UNTRUSTED = "untrusted"
    TRUSTED = "trusted"


class McpServerStatus(models.TextChoices):
    NEW = "new", "never connected"
    CONNECTED = "connected"
    FAILING = "failing"


class McpServer(models.Model):
    """One MCP server. ``argv`` for stdio, ``url`` for Streamable HTTP.

    ``secret_env`` / ``secret_headers`` map a variable or header name to the *path of a file* whose
    content is the value (``*_FILE``, like every other secret): the database never holds the secret.
    """

    name = models.SlugField(max_length=40, unique=True)
    transport = models.CharField(max_length=8, choices=McpTransport.choices)
    argv = models.JSONField(default=list, blank=True, help_text="stdio: the program and its arguments.")
    url = models.CharField(max_length=500, blank=True, help_text="http: the Streamable HTTP endpoint.")
    secret_env = models.JSONField(default=dict, blank=True, help_text="stdio: NAME -> path of a file holding it.")
    secret_headers = models.JSONField(default=dict, blank=True, help_text="http: Header -> path of a file holding it.")
    trust = models.CharField(max_length=10, choices=McpTrust.choices, default=McpTrust.UNTRUSTED)
    agents = models.JSONField(default=list, blank=True, help_text='Agent names that get its tools, or ["*"].')
    enabled = models.BooleanField(default=False)
    allow_sampling = models.BooleanField(default=False, help_text="Serve its sampling requests with the calling "
                                                                  "frame's model (tokens charged to its budget).")
    status = models.CharField(max_length=10, choices=McpServerStatus.choices, default=McpServerStatus.NEW)
    last_error = models.CharField(max_length=500, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = "MCP server"
        constraints = [models.CheckConstraint(condition=models.Q(transport__in=["stdio", "http"]),
                                              name="mcp_server_transport_known")]

    def __str__(self) -> str:
        return self.name

    def serves(self, agent: str) -> bool:
        return "*" in self.agents or agent in self.agents


class McpToolStatus(models.TextChoices):
    ACTIVE = "active"
    QUARANTINED = "quarantined"
    GONE = "gone"


class McpTool(models.Model):
    """A tool of a server with the definition an admin pinned. ``pending`` holds the differing
    definition a later listing showed while the tool is quarantined (empty otherwise)."""

    server = models.ForeignKey(McpServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64, help_text="The tool's name on its server.")
    description = models.TextField(blank=True)
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    digest = models.CharField(max_length=64, help_text="SHA-256 of the pinned definition.")
    status = models.CharField(max_length=12, choices=McpToolStatus.choices, default=McpToolStatus.ACTIVE)
    pending = models.JSONField(default=dict, blank=True, help_text="The new definition awaiting approval.")
    pending_digest = models.CharField(max_length=64, blank=True)
    pinned_at = models.DateTimeField()
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["server", "name"]
        verbose_name = "MCP tool"
        constraints = [models.UniqueConstraint(fields=["server", "name"], name="mcp_tool_unique_name")]

    def __str__(self) -> str:
        return f"mcp__{self.server.name}__{self.name}" if self.server_id else self.name


class McpElicitationStatus(models.TextChoices):
    PENDING = "pending"
    ACCEPTED = "accepted"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


class McpElicitation(models.Model):
    """A server's ``elicitation/create`` during a call: a card for the session's owner.

    Written only through :mod:`skald.mcp.elicitation`. The server waits for the answer (the call's
    timeout paused) until ``expires_at``; then the card is ``expired`` and the server told ``decline``.
    """

    server = models.CharField(max_length=40, help_text="The server's name (kept if the server is deleted).")
    tool = models.CharField(max_length=120, help_text="The call's tool, as offered (mcp__server__tool).")
    session = models.ForeignKey("loop.Session", on_delete=models.CASCADE, related_name="mcp_elicitations")
    exchange_id = models.BigIntegerField()
    tool_call_id = models.BigIntegerField(default=0)
    message = models.TextField()
    requested_schema = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=McpElicitationStatus.choices,
                              default=McpElicitationStatus.PENDING)
    answer = models.JSONField(null=True, blank=True, help_text="The accepted content.")
    answered_by = models.CharField(max_length=64, blank=True, help_text="The principal that answered.")
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "MCP elicitation"
        indexes = [models.Index(fields=["session", "status"], name="mcp_elicitation_session")]
        constraints = [models.CheckConstraint(
            condition=models.Q(status__in=["pending", "accepted", "declined", "cancelled", "expired"]),
            name="mcp_elicitation_status_known")]

    def __str__(self) -> str:
        return f"{self.tool}: {self.message[:60]}"
