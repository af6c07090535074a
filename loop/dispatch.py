"""The one provider-dispatch seam (SPEC L8). Every provider call, parent or child, passes here:
root-owned admission under a lock, cancellation rechecked just before the send, streaming with
live deltas, per-call token metering."""

from __future__ import annotations

import time
from collections.abc import Callable

from loop.budgets import DispatchAuthority
from loop.cancellation import CancelToken
from loop.errors import HarnessError, ProviderError
from loop.providers.base import (
    AssembledTurn,
    AssistantMessage,
    LlmProvider,
    Message,
    ProviderRequest,
    TextDelta,
    ToolResultMessage,
    apply_delta,
    finish_fold,
)


class DispatchCanceled(Exception):
    """Cancellation observed at the seam (before the send or while streaming)."""


def message_size(message: Message) -> int:
    """The bytes a message adds to a request (what the request cap counts)."""
    size = len(message.content.encode("utf-8")) + 16
    if isinstance(message, AssistantMessage):
        size += sum(len(c.arguments.encode("utf-8")) + len(c.name) + len(c.id) for c in message.tool_calls)
    elif isinstance(message, ToolResultMessage):
        size += len(message.call_id)
    return size


def request_bytes(request: ProviderRequest, *, messages_size: int | None = None) -> int:
    """A cheap, conservative size of the request's text content (``messages_size`` when the caller
    already keeps it, as the context window does)."""
    size = len(request.system.encode("utf-8"))
    if messages_size is None:
        messages_size = sum(message_size(message) for message in request.messages)
    size += messages_size
    for tool in request.tools:
        size += len(tool.name) + len(tool.description) + 64 + len(str(tool.parameters))
    return size


def dispatch(
    provider: LlmProvider,
    request: ProviderRequest,
    *,
    authority: DispatchAuthority,
    cancel: CancelToken,
    request_cap: int,
    on_text: Callable[[str], None] | None = None,
    messages_size: int | None = None,
) -> AssembledTurn:
    """Admit, send, stream and meter one provider call.

    Raises:
        BudgetRefused: the authority refuses (spent, or accounting incomplete).
        DispatchCanceled: the token was cancelled before or during the call.
        ProviderError: the provider failed after admission.
        HarnessError: the request is over ``request_cap``.
    """
    size = request_bytes(request, messages_size=messages_size)
    if size > request_cap:
        raise HarnessError(f"request of ~{size} bytes is over the {request_cap}-byte cap", code="request_too_large")
    authority.admit()
    if cancel.cancelled:  # rechecked immediately before the send
        raise DispatchCanceled(cancel.reason)
    turn = AssembledTurn()
    started = time.perf_counter()
    parts: list[str] = []
    calls: dict[int, dict[str, str]] = {}
    stream = provider.stream(request, cancel=cancel)
    streamed = False
    try:
        for delta in stream:
            streamed = True
            if cancel.cancelled:
                raise DispatchCanceled(cancel.reason)
            apply_delta(turn, parts, calls, delta)
            if on_text is not None and isinstance(delta, TextDelta) and delta.text:
                on_text(delta.text)
    except ProviderError:
        # A provider that refused the call before streaming anything (a 503, a bad gateway)
        # generated nothing: its spend is known, zero. Only a call that broke mid-stream has an
        # unknown spend that stops the tree's dispatch (issue 27 §5: a child's 503 is the child's
        # failure, never the tree's budget).
        if streamed or cancel.cancelled:
            authority.settle(None, None)
        else:
            authority.settle(0, 0)
        if cancel.cancelled:
            raise DispatchCanceled(cancel.reason) from None
        raise
    except DispatchCanceled:
        authority.settle(None, None)
        raise
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # dropping the stream cancels the request
    finish_fold(turn, parts, calls)
    if not turn.ended:
        authority.settle(None, None)
        raise ProviderError("the stream ended without a message end", code="provider_incomplete")
    authority.settle(turn.input_tokens, turn.output_tokens)
    turn.duration_ms = round((time.perf_counter() - started) * 1000)
    return turn
