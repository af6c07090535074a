"""Keep a troubleshoot run's status in step with its session's exchanges."""

from __future__ import annotations


def run_sync_from_exchange(exchange_id: int) -> None:
    """Placeholder seam filled by the workflow: runs follow their exchanges."""
    return None
