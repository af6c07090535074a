"""The durable scheduled-job rows (the seed's ``scheduled_jobs`` and ``job_runs``).

A job is what was asked (kind, agent, task, the child's tools, its parent conversation or its cron
expression); a run is one execution of it with its classified ending and its delivery. A task job
has exactly one run; a cron job has one per firing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class JobKind(models.TextChoices):
    TASK = "task", "async task"
    CRON = "cron", "cron job"


class JobStatus(models.TextChoices):
    """A task job follows its run; a cron job is ``scheduled`` until it is ``cancelled``."""

    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"
    CANCELLED = "cancelled"


class RunEnding(models.TextChoices):
    """The one classification of a run's ending (typed: cancellation is never parsed from text).
    ``refused``: its input was refused before it ran (a credential tripwire in the task's text)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REFUSED = "refused"
    CANCELLED = "cancelled"


class ScheduledJob(models.Model):
    kind = models.CharField(max_length=8, choices=JobKind.choices)
    status = models.CharField(max_length=16, choices=JobStatus.choices)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="scheduled_jobs")
    source = models.CharField(max_length=32, default="web", help_text="The parent conversation's source, or the "
                              "owner's home source for a cron job.")
    agent = models.CharField(max_length=64)
    task = models.TextField()
    tools = models.JSONField(default=list, blank=True, help_text="The child's tools (capability subtraction).")
    exec_allowlist = models.JSONField(null=True, blank=True, help_text="The child's execute_cmd programs, narrowed "
                                      "from its creator's at spawn (null: the deployment's).")
    client = models.CharField(max_length=32, blank=True, help_text="An explicit model override, if any.")
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text="What an async task reserved "
                                                   "from its root's budget at spawn (null: its own bounds).")
    selection = models.JSONField(default=dict, blank=True, help_text="Which rule chose which model (S3).")
    scope_extras = models.JSONField(default=dict, blank=True, help_text="The parent scope's case and run.")
    parent_session = models.ForeignKey("loop.Session", null=True, blank=True, on_delete=models.CASCADE,
                                       related_name="spawned_jobs")
    parent_exchange = models.ForeignKey("loop.Exchange", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    parent_call = models.OneToOneField("loop.ToolCall", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="spawned_job")
    child_session = models.OneToOneField("loop.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                         related_name="job")
    home_session = models.ForeignKey("loop.Session", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+", help_text="Where a cron job's runs are announced.")
    notify_owner = models.BooleanField(default=False, help_text="A cron job's home is its owner's Notices "
                                       "conversation (made on first use, again if it was deleted), not one "
                                       "its creator chose.")
    cron = models.CharField(max_length=120, blank=True)
    schedule = models.OneToOneField("django_q.Schedule", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="skald_job")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "source", "status"], name="skald_job_owner_source_status")]
        constraints = [
            models.CheckConstraint(
                condition=(Q(kind="task", parent_session__isnull=False) | Q(kind="cron") & ~Q(cron="")),
                name="skald_job_task_has_parent_cron_has_expression",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} job #{self.pk} ({self.agent})"


class JobRun(models.Model):
    job = models.ForeignKey(ScheduledJob, on_delete=models.CASCADE, related_name="runs")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=RunEnding.choices, default=RunEnding.RUNNING)
    outcome = models.CharField(max_length=32, blank=True, help_text="The kernel outcome the ending came from.")
    output = models.TextField(blank=True, help_text="The final text, or whatever partial output the run made.")
    error = models.CharField(max_length=300, blank=True)
    session = models.ForeignKey("loop.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    exchange = models.ForeignKey("loop.Exchange", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="+")
    delivery_exchange = models.ForeignKey("loop.Exchange", null=True, blank=True, on_delete=models.SET_NULL,
                                          related_name="+")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivery_attempts = models.PositiveSmallIntegerField(default=0, help_text="Deliveries that raised.")
    delivery_error = models.CharField(max_length=300, blank=True, help_text="The last delivery's error.")
    dead_lettered_at = models.DateTimeField(null=True, blank=True, help_text="Parked after too many failed "
                                            "deliveries: the sweep skips it until an operator retries it.")
    returned_tokens = models.PositiveBigIntegerField(null=True, blank=True, help_text="What the task reserved "
                                                     "and did not spend, given back to its root's ledger when it "
                                                     "ended (null: nothing was reserved).")

    class Meta:
        ordering = ["job_id", "number"]
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="skald_jobrun_unique_number")]
        indexes = [models.Index(fields=["status", "delivered_at"], name="skald_jobrun_undelivered")]

    def __str__(self) -> str:
        return f"run {self.number} of job #{self.job_id} ({self.status})"
