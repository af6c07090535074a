"""The per-process PostgreSQL pool (Django's built-in psycopg pool) across ``fork`` and in /metrics.

django-q2 forks its sentinel, workers and monitor (and re-forks a recycled worker) from processes
that may already hold an open pool. A forked child must never use the parent's pool: its idle
connections are the parent's sockets, and its maintenance threads did not survive the fork. Closing
the inherited pool in the child is just as wrong (it would send *Terminate* on the parent's
sockets), so the child keeps the inherited objects referenced, unused, and opens a pool of its own.
"""

from __future__ import annotations

import os
from typing import Any

_inherited: list[Any] = []  # kept alive on purpose: collecting them would close the parent's sockets
_installed = False


def _forget_inherited_pools() -> None:
    from django.db.backends.postgresql.base import DatabaseWrapper

    pools: dict[str, Any] = DatabaseWrapper._connection_pools  # type: ignore[attr-defined]
    if pools:
        _inherited.append(dict(pools))
        pools.clear()
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is not None:  # the parent's socket: drop the reference, do not close it
            _inherited.append(conn.connection)
            conn.connection = None


def install() -> None:
    """Register the after-fork hook once per process (called from ``SkaldConfig.ready``)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_inherited_pools)
        _installed = True


def pool_stats() -> dict[str, int]:
    """This process's pool counters (``psycopg_pool`` names); empty without a pool."""
    from django.db import connections

    conn = connections["default"]
    pool = getattr(conn, "pool", None)
    if pool is None:
        return {}
    return {key: int(value) for key, value in pool.get_stats().items()}
