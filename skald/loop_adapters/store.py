"""The kernel store wired to Skald's audit chain, clock and bus (one per process)."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from loop.ports import ToolContext
from loop.store import Store
from skald.loop_adapters.audit_sink import AuditChainSink
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.clock import DjangoClock


@lru_cache(maxsize=1)
def kernel_store() -> Store:
    return Store(audit=AuditChainSink(), clock=DjangoClock(), bus=ChannelsBus(),
                 lease_seconds=settings.SKALD_LEASE_SECONDS)


def call_fence(context: ToolContext) -> Store | None:
    """The store fenced on the driver that runs the call, for an effect its tool commits after its
    work (``Store.hold_fence`` in the effect's transaction); None when no driver runs it."""
    return kernel_store().fenced(*context.fence) if context.fence is not None else None
