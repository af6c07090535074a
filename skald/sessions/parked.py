"""Stopping a parked exchange: its waiting calls are cancelled (terminal) and it settles Canceled."""

from __future__ import annotations

from django.db import transaction

from loop.models import Exchange, ToolCall, ToolCallStatus
from loop.outcomes import Canceled
from skald.loop_adapters.store import kernel_store


def cancel_parked(exchange: Exchange, *, principal: str) -> None:
    from approvals.services import approvals_cancel_for_calls

    store = kernel_store()
    with transaction.atomic():
        waiting = list(ToolCall.objects.filter(exchange=exchange, status=ToolCallStatus.AWAITING_HUMAN)
                       .values_list("pk", flat=True))
        approvals_cancel_for_calls(tool_call_ids=waiting, actor_label=principal)
        for call in ToolCall.objects.filter(exchange=exchange, status=ToolCallStatus.AWAITING_HUMAN).select_related(
            "frame"
        ):
            store.record_result(call, status=ToolCallStatus.CANCELLED, content="tool call cancelled: stop requested",
                                is_error=True, truncated=False, principal=principal, narrative=call.frame.narrative)
        store.settle(exchange, outcome=Canceled("stop requested").name, principal=principal,
                     detail={"reason": "stop requested"})
