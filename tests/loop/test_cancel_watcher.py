"""The cancel watcher survives a database error (issue 18): its server backend is terminated under
it for real, and a stop requested afterwards still ends the turn."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from loop.driver import run_turns_keyed
from loop.models import Exchange, ToolCall, ToolCallStatus
from loop.outcomes import Canceled
from loop.providers.loopback import LoopbackProvider, text_turn, tool_turn
from loop.sql import exchanges as exchange_rows
from loop.watch import StopWatcher
from tests.loop.fakes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def _record_watcher_backends(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The server backends the stop watcher's thread polls on, as that thread reports them.

    Looking the backend up in ``pg_stat_activity`` by its last query is ambiguous: the driver's
    own admission check runs the same query, so the test could terminate the wrong backend. The
    poll is watched where every store (the driver's fenced one too) sends it: the SQL module.
    """
    backends: list[int] = []
    poll = exchange_rows.cancel_requested

    def reporting_poll(exchange_id: int) -> bool:
        if threading.current_thread().name.startswith("stop-watch:"):
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                backends.append(cursor.fetchone()[0])
        return poll(exchange_id)

    monkeypatch.setattr(exchange_rows, "cancel_requested", reporting_poll)
    return backends


def test_the_watcher_outlives_a_terminated_backend_and_still_sees_the_stop(make_env, session, store,
                                                                          monkeypatch) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("terminating one backend of several needs PostgreSQL (SQLite has no server backends)")
    provider = LoopbackProvider([tool_turn(("nap", {"seconds": 60})), text_turn("done")])
    env = make_env(provider, cancel_poll_interval=0.05)
    backends = _record_watcher_backends(monkeypatch)
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
    wait_until(lambda: backends, "the watcher has polled")
    backend = backends[-1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [backend])
    wait_until(lambda: StopWatcher.transient_errors > errors_before, "the watcher met the terminated backend")

    exchange = Exchange.objects.get(session=session)
    assert store.exchanges.request_cancel(exchange.pk, principal="user:1")
    worker.join(60)

    assert not worker.is_alive()
    assert isinstance(box["result"].outcome, Canceled)
