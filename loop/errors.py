"""The kernel's error families.

``LoopError`` is for infrastructure and contract breaches only (SPEC L3): a turn cap or a
cancellation is an *outcome*, never an exception. ``ToolError`` is model-visible: the pipeline turns
it into an error tool result that the model reads.
"""

from __future__ import annotations


class LoopError(Exception):
    """Base of infrastructure and contract breaches. Carries a stable snake_case ``code``."""

    code: str = "loop_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class HarnessError(LoopError):
    """A broken kernel contract: projection refusal, claim conflict, partial write, bad config."""

    code = "harness_error"


class AdmissionRefused(HarnessError):
    """Another exchange of the session is still active: the new request is refused, nothing stored."""


class SessionBusy(AdmissionRefused):
    code = "session_busy"


class SessionAwaitingHuman(AdmissionRefused):
    """The session's active exchange is parked on a human (an approval or a handoff)."""

    code = "session_awaiting_human"


class ClaimRefused(HarnessError):
    """The exchange is not open, or another driver holds its claim (no double driving)."""

    code = "claim_refused"


class LeaseLost(HarnessError):
    """A driver's lease was taken over (it stalled past ``lease_seconds`` and recovery claimed the
    exchange): it may not write anything more; the new holder goes on from the stored rows."""

    code = "lease_lost"


class ProviderError(LoopError):
    """The provider could not deliver a turn (transport, HTTP status, protocol, SSRF refusal)."""

    code = "provider_error"


class PersistError(LoopError):
    """A durable write failed or was refused (payload cap, duplicate key with different content)."""

    code = "persist_error"


class PayloadTooLarge(PersistError):
    """A row would be over the payload cap: refused before anything of its transaction is stored."""

    code = "payload_too_large"


class InfrastructureError(LoopError):
    """The database or the broker failed under a tool call or a store write: the exchange breaks
    (recovery resolves it later); the failure never reaches the model as a tool result."""

    code = "infrastructure_error"


class HookError(LoopError):
    """A policy hook denied the step. ``reason`` is bounded to 160 characters."""

    code = "hook_denied"


class ToolError(Exception):
    """A model-visible tool failure (bad arguments, timeout, refusal by the tool itself)."""

    def __init__(self, message: str, *, code: str = "tool_error") -> None:
        super().__init__(message)
        self.code = code


class HumanNeeded(Exception):
    """Raised by a tool that needs a human (``ask_human``): the call parks as a handoff."""

    def __init__(self, question: str) -> None:
        super().__init__(question)
        self.question = question
