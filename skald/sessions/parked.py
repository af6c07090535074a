"""Stopping an exchange no live driver holds: its unfinished and waiting calls end canceled (with
their pending approvals) and it settles Canceled, all in one transaction."""

from __future__ import annotations

from django.db import transaction

from loop.models import Exchange, ToolCallStatus
from loop.outcomes import Canceled
from skald.loop_adapters.store import kernel_store
from skald.plugins import notify_calls_cancelled

UNSETTLED = (ToolCallStatus.PLANNED, ToolCallStatus.RUNNING, ToolCallStatus.APPROVED, ToolCallStatus.AWAITING_HUMAN)


def stop_unheld(exchange: Exchange, *, principal: str) -> None:
    """The caller holds the exchange's claim (no worker drives it)."""
    store = kernel_store()
    with transaction.atomic():
        # A child that parked the tree closes first: its spawning call gets its one result.
        store.frames.cancel_open(exchange, reason="stop requested", principal=principal, then=notify_calls_cancelled)
        waiting = store.calls.calls_in(exchange.pk, *UNSETTLED)
        store.calls.cancel_calls(waiting, reason="stop requested", principal=principal, then=notify_calls_cancelled)
        store.exchanges.settle(exchange, Canceled("stop requested"), principal=principal)
