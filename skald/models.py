"""The product core's models: the agent catalog, cases, troubleshoot runs and session workspaces."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AgentKind(models.TextChoices):
    CHAT = "chat"
    TASK = "task"
    SYSTEM = "system"


class Agent(models.Model):
    """An agent in the catalog: prompt, tools, client, bounds overrides and a deterministic playbook."""

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=8, choices=AgentKind.choices, default=AgentKind.CHAT)
    description = models.CharField(max_length=200, blank=True)
    system_prompt = models.TextField(blank=True)
    allowed_tools = models.JSONField(default=list, blank=True, help_text="Tool names this agent may use.")
    client = models.CharField(
        max_length=32, blank=True, help_text="Configured client: 'playbook', 'openai_compat' or empty (auto)."
    )
    strength = models.PositiveSmallIntegerField(default=1)
    bounds = models.JSONField(default=dict, blank=True, help_text="Overrides of the loop bounds (L2).")
    playbook = models.JSONField(default=list, blank=True, help_text="Steps of the deterministic provider.")
    exec_allowlist = models.JSONField(
        null=True, blank=True, help_text="Programs this agent asks to run with execute_cmd when it runs as a child "
        "(it gets its parent's ∩ these). Empty: the parent's.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class CaseStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class Case(models.Model):
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=8, choices=CaseStatus.choices, default=CaseStatus.OPEN)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        permissions = [("write_case", "Can launch and steer troubleshoot runs on cases (domain write)")]

    def __str__(self) -> str:
        return self.title


class CaseLog(models.Model):
    """A log excerpt attached to a case; the ``read_logs`` tool reads these."""

    case = models.ForeignKey(Case, on_delete=models.CASCADE, related_name="logs")
    name = models.CharField(max_length=120)
    content = models.TextField()

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name


class RunStatus(models.TextChoices):
    """A run's state; the labels are what people read (issue 35: "stopped", not "canceled")."""

    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    AWAITING_HUMAN = "awaiting_human", "Waiting for a human"
    HANDOFF = "handoff", "Handed to a human"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Stopped"


class Run(models.Model):
    """A troubleshoot (GDL) run: one session of the troubleshooter agent on a case."""

    case = models.ForeignKey(Case, on_delete=models.PROTECT, related_name="runs")
    session = models.OneToOneField("loop.Session", on_delete=models.PROTECT, related_name="run")
    ticket = models.TextField()
    launched_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    launch_key = models.CharField(max_length=128, unique=True)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    outcome = models.CharField(max_length=32, blank=True)
    receipt = models.JSONField(null=True, blank=True)
    handoff_question = models.TextField(blank=True)
    closed_by_human = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"run {self.pk} on case {self.case_id}"


class WorkspaceBlob(models.Model):
    """File content, stored once by its SHA-256: identical content across sessions shares a row."""

    digest = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveIntegerField()
    content = models.BinaryField()

    def __str__(self) -> str:
        return self.digest[:12]


class WorkspaceFile(models.Model):
    """One file of a session workspace. The database is the workspace: any worker on any machine
    reads and writes the same files; a local directory is only a materialisation for a command."""

    session = models.ForeignKey("loop.Session", on_delete=models.CASCADE, related_name="+")
    path = models.CharField(max_length=512)
    blob = models.ForeignKey(WorkspaceBlob, on_delete=models.PROTECT, related_name="+")
    version = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["session", "path"]
        constraints = [models.UniqueConstraint(fields=["session", "path"], name="workspace_file_unique_path")]

    def __str__(self) -> str:
        return f"session {self.session_id}: {self.path}"


from skald.identity.models import ProviderGroupMapping, ProviderIdentity, TokenRevocation  # noqa: E402  (app models)
from skald.jobs.models import JobKind, JobRun, JobStatus, RunEnding, ScheduledJob  # noqa: E402  (app models)
from skald.mcp.models import McpElicitation, McpServer, McpTool  # noqa: E402  (app models)
from skald.notifications.models import Delivery, Subscription  # noqa: E402  (app models)

__all__ = [
    "Agent", "AgentKind", "Case", "CaseLog", "CaseStatus", "Delivery", "JobKind", "JobRun", "JobStatus",
    "McpElicitation", "McpServer", "McpTool", "ProviderGroupMapping",
    "ProviderIdentity", "Run", "RunEnding", "RunStatus", "ScheduledJob", "Subscription", "TokenRevocation",
    "WorkspaceBlob",
    "WorkspaceFile",
]


class WorkerBeat(models.Model):
    """When a django-q2 worker process last started a task, and until when it may be busy with it.

    One row per worker process (``host:pid``), written at each task start and end
    (``skald.workers``): readiness reads these rows to tell a cluster that makes progress from
    one whose workers all wait on a lock a killed worker never released (issue 28).
    """

    worker = models.CharField(max_length=200, unique=True)
    started_at = models.DateTimeField()
    busy_until = models.DateTimeField(null=True, blank=True)  # started_at + the task timeout while busy

    class Meta:
        ordering = ["-started_at"]
        indexes = [models.Index(fields=["started_at"], name="worker_beat_started")]

    def __str__(self) -> str:
        return f"{self.worker} started a task at {self.started_at:%Y-%m-%d %H:%M:%S}"
