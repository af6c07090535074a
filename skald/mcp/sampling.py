"""Sampling: a server's ``sampling/createMessage`` during a call, served by the calling frame's model.

Refused (the server sees an MCP error) unless the server's ``allow_sampling`` is on. When allowed,
the request goes through the kernel's one provider-dispatch seam (:func:`loop.dispatch.dispatch`)
with the calling frame's provider and the tree's ledger (:class:`loop.budgets.DispatchAuthority`):
admission refuses when the budget is spent, and the tokens are charged to it. Every request, served
or refused, is audited (``skald.mcp.sampling``). Text only: other content blocks are dropped.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from loop.budgets import BudgetRefused
from loop.dispatch import DispatchCanceled, dispatch
from loop.errors import HarnessError, ProviderError
from loop.frame_link import FrameLink
from loop.ports import ToolContext
from loop.providers.base import AssistantMessage, Message, ProviderRequest, UserMessage
from skald.mcp.calls import Sample, SampleAnswer, SampleRequest, SamplingRefused

MAX_TOKENS = 4096  # a server's max_tokens is capped here


def _audit(*, server: str, tool: str, context: ToolContext, payload: dict[str, Any]) -> None:
    with transaction.atomic():
        audit_append(actor=Actor.system(f"mcp:{server}"[:64]), kind=AuditKind.MCP_SAMPLING,
                     subject_type="mcp_sampling", subject_id=context.call_id,
                     payload={"server": server, "tool": tool, "session": context.scope.session_id,
                              "exchange": context.scope.exchange_id, "call": context.call_id, **payload})


def sampler(*, server: str, allowed: bool, tool: str, context: ToolContext) -> Sample:
    """The call's sampling handler (run on a thread of the pool's, off its event loop)."""

    def sample(request: SampleRequest) -> SampleAnswer:
        try:
            return _sample(request)
        finally:
            connection.close()  # this helper thread's own

    def refuse(reason: str, code: str) -> SamplingRefused:
        _audit(server=server, tool=tool, context=context, payload={"served": False, "code": code, "reason": reason})
        return SamplingRefused(reason)

    def _sample(request: SampleRequest) -> SampleAnswer:
        if not allowed:
            raise refuse(f"sampling is not allowed for MCP server {server!r}", "mcp_sampling_not_allowed")
        link = context.frame
        if not isinstance(link, FrameLink):
            raise refuse("sampling needs a calling frame", "mcp_sampling_no_frame")
        messages: list[Message] = [AssistantMessage(content=text) if role == "assistant" else UserMessage(content=text)
                                   for role, text in request.messages]
        provider_request = ProviderRequest(
            system=request.system, messages=tuple(messages), temperature=request.temperature or 0.0,
            max_output_tokens=max(1, min(request.max_tokens, MAX_TOKENS)),
            metadata={"session": context.scope.session_id, "mcp_sampling": server})
        try:
            turn = dispatch(link.env.provider, provider_request, authority=link.authority, cancel=context.cancel,
                            request_cap=link.env.bounds.request_cap)
        except BudgetRefused as exc:
            raise refuse(f"the frame's token budget refuses it ({exc.reason})", "mcp_sampling_budget") from None
        except (ProviderError, HarnessError, DispatchCanceled) as exc:
            raise refuse(f"the model did not answer: {str(exc)[:200]}", "mcp_sampling_failed") from None
        _audit(server=server, tool=tool, context=context, payload={
            "served": True, "agent": link.env.agent.name, "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens, "finish_reason": turn.finish_reason})
        stop = {"length": "maxTokens", "max_tokens": "maxTokens"}.get(turn.finish_reason or "", "endTurn")
        return SampleAnswer(text=turn.text, model=link.env.agent.client or "skald", stop_reason=stop)

    return sample
