"""The kernel's durable store (SPEC L4, L5): sessions, frames, tool calls, events, exchanges.

Only :mod:`loop.store` writes these rows; everything else reads them through it or through
product selectors. Rows of the narrative (``SessionEvent``) are append-only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Session(models.Model):
    """A conversation owned by a user. ``last_seq`` allocates the per-session event sequence."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="loop_sessions")
    source = models.CharField(max_length=32, default="web")
    agent = models.CharField(max_length=64)
    title = models.CharField(max_length=200, blank=True)
    last_seq = models.PositiveBigIntegerField(default=0)
    exchange_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"session {self.pk} ({self.agent})"


class ExchangeStatus(models.TextChoices):
    OPEN = "open", "open (claimed, running)"
    PARKED = "parked", "parked (awaiting a human)"
    SETTLED = "settled", "settled (terminal receipt)"
    BROKEN = "broken", "broken (partial write, claim retained)"


class Outcome(models.TextChoices):
    """The terminal, typed ``RunOutcome`` vocabulary (SPEC L3)."""

    COMPLETED = "completed"
    TURN_CAP_REACHED = "turn_cap_reached"
    BUDGET_EXCEEDED = "budget_exceeded"
    CANCELED = "canceled"
    PROVIDER_FAILED = "provider_failed"
    AWAITING_HUMAN = "awaiting_human"


class Exchange(models.Model):
    """One admitted request to a session: a request key, a claim, a status and a receipt."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="exchanges")
    number = models.PositiveIntegerField()
    request_key = models.CharField(max_length=128)
    input = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=ExchangeStatus.choices, default=ExchangeStatus.OPEN)
    outcome = models.CharField(max_length=32, choices=Outcome.choices, blank=True)
    claim_token = models.CharField(max_length=64, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    # A claim is a lease: its driver renews it while it works; once it lapses, recovery may take over.
    lease_until = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    turns = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    budget_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    reserved_tokens = models.PositiveBigIntegerField(default=0)
    # What async tasks reserved from this ledger and did not spend, given back when each ended
    # (written by the task's ending, never by this exchange's driver; the spend is the difference).
    returned_tokens = models.PositiveBigIntegerField(default=0)
    accounting_incomplete = models.BooleanField(default=False)
    config = models.JSONField(default=dict, blank=True)
    # The W3C trace context of the admission (loop.tracing): every later driver continues its trace.
    traceparent = models.CharField(max_length=64, blank=True, default="")
    receipt = models.JSONField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField()
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["session_id", "number"]
        constraints = [
            models.UniqueConstraint(fields=["session", "request_key"], name="loop_exchange_unique_request_key"),
            models.UniqueConstraint(fields=["session", "number"], name="loop_exchange_unique_number"),
            # At most one active exchange per session (SPEC L4): admission inserts without
            # looking first, and a second active one fails here (loop.store_exchanges.admit).
            models.UniqueConstraint(fields=["session"], name="loop_exchange_one_active",
                                    condition=models.Q(status__in=["open", "parked"])),
        ]

    def __str__(self) -> str:
        return f"exchange e{self.number} of session {self.session_id}"


class FrameStatus(models.TextChoices):
    OPEN = "open"
    CLOSED = "closed"


class Frame(models.Model):
    """One level of the agent stack: the root agent at depth 0, delegates below it (SPEC S1)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="frames")
    exchange = models.ForeignKey(Exchange, on_delete=models.CASCADE, related_name="frames")
    depth = models.PositiveSmallIntegerField(default=0)
    agent = models.CharField(max_length=64)
    narrative = models.CharField(max_length=96, blank=True)  # "" for the root, "child:<name>:" below
    parent_call = models.ForeignKey(
        "ToolCall", null=True, blank=True, on_delete=models.CASCADE, related_name="child_frames"
    )
    status = models.CharField(max_length=8, choices=FrameStatus.choices, default=FrameStatus.OPEN)
    outcome = models.CharField(max_length=32, choices=Outcome.choices, blank=True)
    # A child's model choice (SPEC S3): which rule chose which client and model; {} for the root.
    selection = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"frame {self.pk} depth {self.depth} ({self.agent})"


class ToolCallStatus(models.TextChoices):
    PLANNED = "planned"
    RUNNING = "running"
    AWAITING_HUMAN = "awaiting_human"
    APPROVED = "approved"  # a human approved it; it runs next, with the gate skipped
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"  # one spelling across the kernel (the outcome is ``canceled`` too)
    REJECTED = "rejected"
    INTERRUPTED = "interrupted"
    EXPIRED = "expired"


TERMINAL_TOOL_CALL_STATUSES = frozenset(
    {
        ToolCallStatus.COMPLETED,
        ToolCallStatus.FAILED,
        ToolCallStatus.CANCELED,
        ToolCallStatus.REJECTED,
        ToolCallStatus.INTERRUPTED,
        ToolCallStatus.EXPIRED,
    }
)


class ToolCall(models.Model):
    """A tool call's state machine (SPEC L9, R1). ``call_key`` is ``e{exchange}:t{turn}:c{index}``."""

    # No index of its own: the (session, status) index leads with it.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="tool_calls", db_index=False)
    exchange = models.ForeignKey(Exchange, on_delete=models.CASCADE, related_name="tool_calls")
    frame = models.ForeignKey(Frame, on_delete=models.CASCADE, related_name="tool_calls")
    turn = models.PositiveIntegerField()
    index = models.PositiveIntegerField()
    call_key = models.CharField(max_length=64)
    provider_call_id = models.CharField(max_length=128, blank=True)
    tool = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict, blank=True)
    arguments_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=ToolCallStatus.choices, default=ToolCallStatus.PLANNED)
    result = models.TextField(blank=True)
    is_error = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["frame", "turn", "index"], name="loop_toolcall_unique_position"),
        ]
        indexes = [models.Index(fields=["session", "status"], name="loop_toolcall_session_status")]

    def __str__(self) -> str:
        return f"{self.tool} [{self.call_key}] {self.status}"


class SessionEvent(models.Model):
    """An append-only narrative row. ``seq`` is per session; ``idempotency_key`` is global."""

    # No index of its own: the unique (session, seq) constraint leads with it.
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="events", db_index=False)
    seq = models.PositiveBigIntegerField()
    exchange = models.ForeignKey(Exchange, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=48)
    narrative = models.CharField(max_length=96, blank=True)
    payload = models.JSONField(default=dict)
    # Unique by a constraint, not ``unique=True``: on PostgreSQL the field option also builds a
    # varchar_pattern_ops index for LIKE, which nothing runs and every appended row would maintain.
    idempotency_key = models.CharField(max_length=200)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["session_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["session", "seq"], name="loop_event_unique_seq"),
            models.UniqueConstraint(fields=["idempotency_key"], name="loop_event_unique_key"),
        ]

    def __str__(self) -> str:
        return f"#{self.seq} {self.narrative}{self.kind}"


class ScratchpadEntry(models.Model):
    """A session scratchpad key: siblings share it, last writer wins (SPEC S2)."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="scratchpad")
    key = models.CharField(max_length=128)
    value = models.TextField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["session", "key"], name="loop_scratchpad_unique_key")]

    def __str__(self) -> str:
        return self.key


class Work(models.Model):
    """A transactional outbox row: work that must happen, written in the transaction that creates
    the need (an exchange to drive, an answered approval to carry out). The queue only makes it
    happen sooner; a sweeper hands out rows that are due again and not done, so a task lost with
    its worker (or never enqueued) is sent again. ``task`` and ``args`` are the product's."""

    key = models.CharField(max_length=200, unique=True)
    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()  # when a sweeper may hand it out (again)
    attempts = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["done_at", "due_at"], name="loop_work_pending")]

    def __str__(self) -> str:
        return f"{self.task} {self.key}"

