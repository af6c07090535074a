"""The one projection (SPEC L6): stored narrative rows → provider messages.

Every text a provider request carries from the narrative passes :func:`_convert`, and there the
credential guard (SPEC L16) withholds any text a tripwire matches — whatever path wrote the row
(user, tool result, scratchpad read, compaction summary, sub-agent result, a model's own text).
The guard is not optional: a new kind of row is covered by construction.

Pure and deterministic, so replay-verify can call it without a model. It refuses loudly on a
partial tool group, an orphan result, a name mismatch, a duplicate, an unknown kind, or a
compaction row anywhere but the start of the window (CompactionBoundary).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import ValidationError

from loop.errors import HarnessError
from loop.events import (
    CONVERSATION_KINDS,
    PAYLOAD_MODELS,
    AssistantPayload,
    CompactionPayload,
    EventKind,
    SubagentResultPayload,
    ToolResultPayload,
    UserPayload,
    is_journal,
)
from loop.providers.base import (
    AssistantMessage,
    Message,
    SummaryMessage,
    ToolCallRequest,
    ToolResultMessage,
    UserMessage,
)
from loop.tripwires import Detector
from loop.tripwires.guard import withhold_credentials


class ProjectionError(HarnessError):
    code = "projection_refused"


class CompactionBoundary(ProjectionError):
    code = "compaction_boundary"


@dataclass(frozen=True, slots=True)
class EventRow:
    """A stored narrative row, detached from the ORM."""

    seq: int
    kind: str
    payload: Mapping[str, Any]
    exchange: int | None = None
    narrative: str = ""


class Replay(NamedTuple):
    """Rows read for a context window (oldest first), whether older rows were cut off, and the
    session row's creation time: a window cached under a session id that was deleted and handed
    out again must not be continued for the new session."""

    rows: list[EventRow]
    capped: bool
    session_stamp: Any


def call_key(exchange: int, turn: int, index: int) -> str:
    """The re-keyed call id the model sees: ``e{exchange}:t{turn}:c{index}``."""
    return f"e{exchange}:t{turn}:c{index}"


def tail_first_seq(row: EventRow) -> int:
    """The first seq of the verbatim tail a compaction row keeps (its own seq when it keeps none)."""
    manifest = row.payload.get("manifest") if isinstance(row.payload, Mapping) else None
    value = manifest.get("tail_first_seq") if isinstance(manifest, Mapping) else None
    return value if isinstance(value, int) else row.seq


def window_start(rows: Sequence[EventRow], *, capped: bool) -> int:
    """Where a replay window may begin when no compaction row is in ``rows``: the first row, or
    (when older rows were cut off by the replay cap) the first user row, so a tool group is never
    split."""
    if not capped:
        return 0
    for position, row in enumerate(rows):
        if row.kind == EventKind.USER:
            return position
    raise ProjectionError("the replay window holds no user row to start from", code="replay_window_unbounded")


def arrange_window(rows: Sequence[EventRow], *, capped: bool = False) -> list[EventRow]:
    """The replay window over ``rows`` (one narrative, seq order): it starts at the latest
    compaction row, followed by the verbatim tail that compaction kept (rows from its manifest's
    ``tail_first_seq`` up to it) and every row after it. Rows are referenced, never rewritten.
    Without a compaction the window is ``rows`` (cut at a user row when ``capped``)."""
    for position in range(len(rows) - 1, -1, -1):
        boundary = rows[position]
        if boundary.kind == EventKind.COMPACTION:
            keep_from = tail_first_seq(boundary)
            tail = [row for row in rows[:position] if row.seq >= keep_from]
            return [boundary, *tail, *rows[position + 1:]]
    return list(rows[window_start(rows, capped=capped):])


def _parse(row: EventRow) -> Any:
    model = PAYLOAD_MODELS.get(row.kind)
    if model is None:
        raise ProjectionError(f"row {row.seq}: kind {row.kind!r} is not in the vocabulary")
    try:
        return model.model_validate(row.payload)
    except ValidationError as exc:
        raise ProjectionError(f"row {row.seq}: malformed {row.kind} payload ({exc.error_count()} errors)") from None


def _identity(text: str) -> str:
    return text


def _convert(row: EventRow, mask: Callable[[str], str], guard: Detector | None) -> tuple[Any, Message]:
    parsed = _parse(row)

    def screen(text: str, what: str) -> str:
        return mask(withhold_credentials(text, what=what, detector=guard))

    message: Message
    if isinstance(parsed, ToolResultPayload):
        message = ToolResultMessage(
            call_id=parsed.key, name=parsed.name, content=screen(parsed.content, "tool output"),
            is_error=parsed.is_error,
        )
    elif isinstance(parsed, AssistantPayload):
        message = AssistantMessage(
            content=screen(parsed.content, "assistant text"),
            tool_calls=tuple(
                ToolCallRequest(id=c.key, name=c.name, arguments=screen(c.arguments, "tool arguments"))
                for c in parsed.tool_calls
            ),
        )
    elif isinstance(parsed, UserPayload):
        message = UserMessage(content=screen(parsed.content, "message"))
    elif isinstance(parsed, CompactionPayload):
        message = SummaryMessage(kind="compaction", content=screen(parsed.summary, "summary"))
    else:
        assert isinstance(parsed, SubagentResultPayload)
        message = SummaryMessage(kind="delegation", content=screen(parsed.content, "sub-agent result"))
    return parsed, message


class Folder:
    """Folds rows into messages one at a time, refusing loudly as it goes; :func:`project` and the
    incremental context window share it, so there is one set of rules."""

    def __init__(self, mask: Callable[[str], str] = _identity,
                 memo: dict[int, tuple[Any, Message]] | None = None, *, guard: Detector | None = None) -> None:
        self.mask = mask
        self.guard = guard
        self.memo = memo
        self.pending: dict[str, str] = {}  # call key → tool name, for the open tool group
        self.seen: set[str] = set()

    def add(self, row: EventRow, *, first: bool) -> tuple[Message | None, tuple[str, ...]]:
        """The message ``row`` contributes (None for journal rows) and the call keys it opens."""
        if is_journal(row.kind):
            return None, ()
        if row.kind not in CONVERSATION_KINDS:
            raise ProjectionError(f"row {row.seq}: kind {row.kind!r} is not in the vocabulary")
        if row.kind == EventKind.SUBAGENT_RESULT:
            # A child's durable result record: the model reads that text through the tool result of
            # the call that spawned the child (recorded just before it), so it adds no message —
            # a second copy would double its tokens, and a message inside an open tool group is
            # not valid on the wire. It must name a call of this narrative that has its result.
            key = str(_parse(row).key)
            if key not in self.seen or key in self.pending:
                raise ProjectionError(f"row {row.seq}: subagent_result for call {key} without its tool result")
            return None, ()
        entry = self.memo.get(row.seq) if self.memo is not None else None
        if entry is None:
            entry = _convert(row, self.mask, self.guard)
            if self.memo is not None:
                self.memo[row.seq] = entry
        parsed, message = entry
        opened: tuple[str, ...] = ()
        if isinstance(parsed, ToolResultPayload):
            expected = self.pending.pop(parsed.key, None)
            if expected is None:
                reason = "duplicate" if parsed.key in self.seen else "orphan"
                raise ProjectionError(f"row {row.seq}: {reason} result for call {parsed.key}")
            if expected != parsed.name:
                raise ProjectionError(f"row {row.seq}: result names {parsed.name!r}, call was {expected!r}")
        else:
            if self.pending:
                raise ProjectionError(
                    f"row {row.seq}: partial tool group, no result for {', '.join(sorted(self.pending))}"
                )
            if isinstance(parsed, CompactionPayload) and not first:
                raise CompactionBoundary(f"row {row.seq}: compaction row inside the projected window")
            if isinstance(parsed, AssistantPayload):
                for call in parsed.tool_calls:
                    if call.key in self.pending or call.key in self.seen:
                        raise ProjectionError(f"row {row.seq}: duplicate call key {call.key}")
                    self.pending[call.key] = call.name
                    self.seen.add(call.key)
                opened = tuple(call.key for call in parsed.tool_calls)
        return message, opened

    def close(self) -> None:
        if self.pending:
            raise ProjectionError(f"partial tool group at the end: no result for {', '.join(sorted(self.pending))}")


def project(
    rows: Sequence[EventRow],
    *,
    mask: Callable[[str], str] = _identity,
    memo: dict[int, tuple[Any, Message]] | None = None,
    guard: Detector | None = None,
) -> tuple[Message, ...]:
    """Turn ``rows`` (one narrative, in seq order, already windowed) into messages.

    Args:
        rows: the window; journal rows are skipped.
        mask: applied to every text that reaches the model (PII masking, SPEC L16).
        memo: optional seq → (payload, message) cache, so a long session converts each row once.
            Only valid for one ``mask`` and ``guard``.
        guard: the credential detector (SPEC L16); the vendored rule set when None. Text it
            matches is replaced by a notice naming the kinds before ``mask`` sees it.
    """
    folder = Folder(mask, memo, guard=guard)
    messages: list[Message] = []
    for position, row in enumerate(rows):
        message, _opened = folder.add(row, first=position == 0)
        if message is not None:
            messages.append(message)
    folder.close()
    return tuple(messages)
