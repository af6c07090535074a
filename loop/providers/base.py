"""The provider seam (SPEC L7): value-typed, provider-neutral requests and streamed deltas.

A provider turns one :class:`ProviderRequest` into an iterator of :data:`Delta` values. The
iterator is the stream: closing it (``close()`` on the generator, or dropping it) cancels the
request, and a cancelled :class:`~loop.cancellation.CancelToken` aborts a blocked read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from loop.cancellation import CancelToken

# --- messages: the closed vocabulary the projection produces (SPEC L6) -----------------------


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A tool call the model asked for. ``arguments`` is the raw JSON text the model produced."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class UserMessage:
    content: str
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    role: Literal["assistant"] = "assistant"


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    call_id: str
    name: str
    content: str
    is_error: bool = False
    role: Literal["tool"] = "tool"


@dataclass(frozen=True, slots=True)
class SummaryMessage:
    """A delegation summary (a child's result) or a compaction summary, shown to the model as context."""

    kind: Literal["delegation", "compaction"]
    content: str
    role: Literal["summary"] = "summary"


Message = UserMessage | AssistantMessage | ToolResultMessage | SummaryMessage


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: name, description and a JSON schema for its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """One provider call. ``temperature`` must be set (0.0) or the HTTP adapter refuses to send."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str = ""
    temperature: float | None = 0.0
    max_output_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


# --- deltas: what a stream yields -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of tool call number ``index``; ``id``/``name`` arrive on the first fragment."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class UsageDelta:
    input_tokens: int
    output_tokens: int
    kind: Literal["usage"] = "usage"


@dataclass(frozen=True, slots=True)
class MessageEnd:
    """The provider finished the turn. A stream without it is incomplete (accounting-incomplete)."""

    finish_reason: str = "stop"
    kind: Literal["end"] = "end"


Delta = TextDelta | ToolCallDelta | UsageDelta | MessageEnd


@runtime_checkable
class LlmProvider(Protocol):
    """A source of assistant turns.

    ``name`` is the only thing about a provider the inspector and readiness may show.
    """

    name: str

    def stream(self, request: ProviderRequest, *, cancel: CancelToken) -> Iterator[Delta]:
        """Stream one assistant turn as typed deltas; raise :class:`loop.errors.ProviderError`."""
        ...


@dataclass(slots=True)
class AssembledTurn:
    """The folded result of one stream: what ``message_end`` persists."""

    text: str = ""
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reason: str | None = None
    duration_ms: int | None = None  # measured by the dispatch seam

    @property
    def ended(self) -> bool:
        return self.finish_reason is not None

    @property
    def has_usage(self) -> bool:
        return self.input_tokens is not None and self.output_tokens is not None


def fold_deltas(deltas: Iterator[Delta] | list[Delta]) -> AssembledTurn:
    """Assemble a complete turn from deltas (tool-call fragments joined by index, in order)."""
    turn = AssembledTurn()
    parts: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    for delta in deltas:
        apply_delta(turn, parts, calls, delta)
    return finish_fold(turn, parts, calls)


def apply_delta(
    turn: AssembledTurn, parts: list[str], calls: dict[int, dict[str, str]], delta: Delta
) -> None:
    """Fold one delta into the accumulators (used by the driver while it streams)."""
    if isinstance(delta, TextDelta):
        parts.append(delta.text)
    elif isinstance(delta, ToolCallDelta):
        slot = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
        if delta.id:
            slot["id"] = delta.id
        if delta.name:
            slot["name"] = delta.name
        slot["arguments"] += delta.arguments
    elif isinstance(delta, UsageDelta):
        turn.input_tokens = (turn.input_tokens or 0) + delta.input_tokens
        turn.output_tokens = (turn.output_tokens or 0) + delta.output_tokens
    elif isinstance(delta, MessageEnd):
        turn.finish_reason = delta.finish_reason


def finish_fold(
    turn: AssembledTurn, parts: list[str], calls: dict[int, dict[str, str]]
) -> AssembledTurn:
    turn.text = "".join(parts)
    turn.tool_calls = [
        ToolCallRequest(id=slot["id"] or f"call_{index}", name=slot["name"], arguments=slot["arguments"])
        for index, slot in sorted(calls.items())
    ]
    return turn
