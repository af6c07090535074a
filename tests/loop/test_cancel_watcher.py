"""The cancel watcher survives a database error (issue 18): its server backend is terminated under
it for real, and a stop requested afterwards still ends the turn."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from loop.driver import run_turns_keyed
from loop.models import Exchange, ToolCall, ToolCallStatus
from loop.outcomes import Canceled
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.watch import StopWatcher
from skald.loop_adapters.store import kernel_store

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def wait_until(probe: Any, what: str, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting until {what}")


def _watcher_backend() -> int | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND query LIKE %s", ['SELECT 1 AS%"cancel_requested_at" IS NOT NULL%'])
        row = cursor.fetchone()
    return row[0] if row else None


def test_the_watcher_outlives_a_terminated_backend_and_still_sees_the_stop(make_env, session) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("terminating one backend of several needs PostgreSQL (SQLite has no server backends)")
    provider = LoopbackProvider([tool_turn(("nap", {"seconds": 60})), text_turn("done")])
    env = make_env(provider, cancel_poll_interval=0.05)
    box: dict[str, Any] = {}

    def drive() -> None:
        try:
            box["result"] = run_turns_keyed(env, request_key="k1", content="take a nap")
        finally:
            connection.close()

    errors_before = StopWatcher.transient_errors
    worker = threading.Thread(target=drive)
    worker.start()
    wait_until(lambda: ToolCall.objects.filter(session=session, status=ToolCallStatus.RUNNING).exists(),
               "the nap runs")
    backend = wait_until(_watcher_backend, "the watcher has polled")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    wait_until(lambda: StopWatcher.transient_errors > errors_before, "the watcher met the terminated backend")

    exchange = Exchange.objects.get(session=session)
    assert kernel_store().request_cancel(exchange.pk, principal="user:1")
    worker.join(60)

    assert not worker.is_alive()
    assert isinstance(box["result"].outcome, Canceled)
