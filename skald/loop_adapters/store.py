"""The kernel store wired to Skald's audit chain, clock and bus (one per process)."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from loop.store import Store
from skald.loop_adapters.audit_sink import AuditChainSink
from skald.loop_adapters.bus import ChannelsBus
from skald.loop_adapters.clock import DjangoClock


@lru_cache(maxsize=1)
def kernel_store() -> Store:
    return Store(audit=AuditChainSink(), clock=DjangoClock(), bus=ChannelsBus(),
                 lease_seconds=settings.SKALD_LEASE_SECONDS)
