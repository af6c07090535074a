"""Stopping an exchange no live driver holds: its unfinished and waiting calls end canceled (with
their pending approvals) and it settles Canceled, all in one transaction."""

from __future__ import annotations

from django.db import transaction

from loop.models import Exchange, ToolCallStatus
from loop.outcomes import CancelCause, Canceled
from skald.loop_adapters.store import kernel_store
from skald.plugins import notify_calls_cancelled

UNSETTLED = (ToolCallStatus.PLANNED, ToolCallStatus.RUNNING, ToolCallStatus.APPROVED, ToolCallStatus.AWAITING_HUMAN)


STOPPED = Canceled("stop requested")
TASK_WITHDRAWN = Canceled("the task was cancelled", cause=CancelCause.WITHDRAWN)


def stop_unheld(exchange: Exchange, *, principal: str, ending: Canceled = STOPPED) -> None:
    """The caller holds the exchange's claim (no worker drives it). ``ending`` says why: a stop, or
    (``TASK_WITHDRAWN``) the async task the exchange runs was cancelled, which its approval cards
    read as withdrawn."""
    store = kernel_store()
    with transaction.atomic():
        # A child that parked the tree closes first: its spawning call gets its one result.
        store.frames.cancel_open(exchange, reason=ending.reason, principal=principal, then=notify_calls_cancelled)
        waiting = store.calls.calls_in(exchange.pk, *UNSETTLED)
        store.calls.cancel_calls(waiting, reason=ending.reason, principal=principal, then=notify_calls_cancelled)
        store.exchanges.settle(exchange, ending, principal=principal)
