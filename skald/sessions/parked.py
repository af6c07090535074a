"""Stopping a parked exchange: its waiting calls are canceled (terminal) and it settles Canceled."""

from __future__ import annotations

from django.db import transaction

from loop.models import Exchange, ToolCallStatus
from loop.outcomes import Canceled
from skald.loop_adapters.store import kernel_store
from skald.plugins import notify_calls_cancelled


def cancel_parked(exchange: Exchange, *, principal: str) -> None:
    store = kernel_store()
    with transaction.atomic():
        waiting = store.calls_in(exchange.pk, ToolCallStatus.AWAITING_HUMAN)
        notify_calls_cancelled([call.pk for call in waiting], principal)  # their pending approvals end with them
        store.cancel_calls(waiting, reason="stop requested", principal=principal)
        store.settle(exchange, Canceled("stop requested"), principal=principal)
