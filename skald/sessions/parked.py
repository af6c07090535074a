"""Stopping a parked exchange: its waiting calls are cancelled (terminal) and it settles Canceled."""

from __future__ import annotations

from django.db import transaction

from loop.models import Exchange, ToolCall, ToolCallStatus
from loop.outcomes import Canceled
from skald.loop_adapters.store import kernel_store
from skald.plugins import notify_calls_cancelled


def cancel_parked(exchange: Exchange, *, principal: str) -> None:
    store = kernel_store()
    with transaction.atomic():
        waiting = list(ToolCall.objects.filter(exchange=exchange, status=ToolCallStatus.AWAITING_HUMAN)
                       .values_list("pk", flat=True))
        notify_calls_cancelled(waiting, principal)  # their pending approvals end with them
        for call in ToolCall.objects.filter(exchange=exchange, status=ToolCallStatus.AWAITING_HUMAN).select_related(
            "frame"
        ):
            store.record_result(call, status=ToolCallStatus.CANCELLED, content="tool call cancelled: stop requested",
                                is_error=True, truncated=False, principal=principal, narrative=call.frame.narrative)
        store.settle(exchange, outcome=Canceled("stop requested").name, principal=principal,
                     detail={"reason": "stop requested"})
