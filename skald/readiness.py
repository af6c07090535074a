"""Liveness and readiness probes. Readiness never echoes a URL, path, model name or secret."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection

from skald import provider_config
from skald.workers import workers_progress


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return "ok"
    except Exception:  # noqa: BLE001 - readiness reports, it does not raise
        return "unavailable"


def _channel_layer() -> str:
    layer = get_channel_layer()
    if layer is None:
        return "unavailable"
    try:
        # A group send to a group nobody joins reaches the layer's backend but queues nothing:
        # a plain send to an unread channel would fill it up probe after probe.
        async_to_sync(layer.group_send)("skald.readiness", {"type": "readiness.ping"})
        return "ok"
    except Exception:  # noqa: BLE001
        return "unavailable"


def _workers() -> tuple[str, int]:
    """``ok``, ``missing`` (no cluster serves), ``wedged`` (clusters serve, yet due work waits and
    no worker started a task within the bound: ``skald.workers``) or ``unavailable``."""
    try:
        clusters = _serving_clusters()
        if not clusters:
            return "missing", 0
        # A cluster whose workers all wait on a lock a killed worker held still says "idle".
        return workers_progress(), clusters
    except Exception:  # noqa: BLE001
        return "unavailable", 0


def _serving_clusters() -> int:
    from django_q.brokers import get_broker
    from django_q.conf import Conf
    from django_q.status import Stat

    # A stopped cluster's last stat stays in the cache for a few seconds (and across a restart,
    # in the file cache under var/): only a cluster that takes tasks counts.
    serving = {str(Conf.IDLE), str(Conf.WORKING)}
    return len([stat for stat in Stat.get_all(get_broker()) if str(stat.status) in serving])


def readiness_report() -> tuple[bool, dict[str, Any]]:
    """``(ready, body)``: ready when the database and channel layer answer, a cluster serves and its
    workers make progress, and the provider profile is not invalid."""
    database = _database()
    layer = _channel_layer()
    workers, clusters = _workers()
    gdl = provider_config.provider_status()
    ready = database == "ok" and layer == "ok" and workers == "ok" and gdl != "invalid"
    body = {
        "status": "ready" if ready else "not_ready",
        "database": database,
        "channel_layer": layer,
        "workers": workers,
        "clusters": clusters,
        "gdl_provider": gdl,
    }
    return ready, body
