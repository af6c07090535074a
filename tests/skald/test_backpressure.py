"""Backpressure instead of errors (issue 18): a saturated resource answers 503 with Retry-After and
a stable code after a bounded wait, never a 500 and never a dropped connection."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from skald.backpressure import AdmissionGate


class Held:
    """An ASGI app whose requests answer only once ``release`` is set."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered.set()
        await self.release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


async def call(app: Any, path: str = "/api/sessions/") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
    return sent


@pytest.mark.asyncio
async def test_it_answers_503_server_busy_with_retry_after_when_every_slot_stays_busy() -> None:
    inner = Held()
    gate = AdmissionGate(inner, limit=1, wait_seconds=0.05, retry_after=3)
    first = asyncio.create_task(call(gate))
    await inner.entered.wait()

    refused = await call(gate)

    start, body = refused
    assert start["status"] == 503 and (b"retry-after", b"3") in start["headers"]
    assert json.loads(body["body"]) == {"code": "server_busy", "extra": {"retry_after": 3},
                                        "message": "All 1 request slots stayed busy for 0.05 s."}
    assert gate.refused == 1
    inner.release.set()
    assert (await first)[0]["status"] == 200


@pytest.mark.asyncio
async def test_a_waiting_request_runs_once_a_slot_frees_and_probes_never_wait() -> None:
    inner = Held()
    gate = AdmissionGate(inner, limit=1, wait_seconds=30, retry_after=1)
    first = asyncio.create_task(call(gate))
    await inner.entered.wait()
    second = asyncio.create_task(call(gate))
    probe = asyncio.create_task(call(gate, "/healthz"))  # exempt: it runs beside the held request
    await asyncio.sleep(0)
    inner.release.set()

    assert [(await task)[0]["status"] for task in (first, second, probe)] == [200, 200, 200]
    assert gate.refused == 0


def _every_pooled_connection_held(pool: Any) -> list[Any]:
    from psycopg_pool import PoolTimeout

    held = []
    while True:
        try:
            held.append(pool.getconn(timeout=0.2))
        except PoolTimeout:
            return held


def _in_thread(fn: Any) -> Any:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        finally:
            connection.close()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    return box["value"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_a_request_that_gets_no_pooled_connection_answers_503_not_500(alice, api) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the connection pool exists on PostgreSQL only (SQLite has no pool to exhaust)")
    client = api(alice)
    browser = Client(raise_request_exception=False)
    browser.force_login(alice)
    pool = connection.pool
    pool.timeout, saved = 0.2, pool.timeout  # the bounded wait, shortened for the test
    held = _every_pooled_connection_held(pool)
    try:
        answered = _in_thread(lambda: client.get("/api/sessions/"))
        page = _in_thread(lambda: browser.get("/admin/"))  # not DRF: Django's handler500 path
    finally:
        for conn in held:
            pool.putconn(conn)
        pool.timeout = saved

    assert held, "the pool gave out no connection at all"
    for response in (answered, page):
        assert response.status_code == 503
        assert response["Retry-After"] == "2"
        assert response.json()["code"] == "db_pool_exhausted"


@pytest.mark.django_db(transaction=True)
def test_a_message_to_a_saturated_queue_answers_503_and_stores_nothing(alice, api, settings) -> None:
    from django_q.tasks import async_task

    from loop.models import Exchange
    from skald.agents.seed import seed_agents
    from skald.core import queue

    settings.SKALD_SYNC_TASKS = False
    settings.SKALD_QUEUE_MAX_PENDING = 1
    settings.SKALD_QUEUE_WAIT_SECONDS = 0
    seed_agents()
    queue._broker = None  # this test's broker (the ORM broker of the test database)
    client = api(alice)
    session = client.post("/api/sessions/", {"agent": "troubleshooter"}, format="json").json()
    async_task("skald.tasks.expire_approvals")  # one task already waits; no worker runs here

    response = client.post(f"/api/sessions/{session['id']}/messages/", {"content": "hello"}, format="json")

    assert response.status_code == 503 and response["Retry-After"] == "2"
    assert response.json()["code"] == "queue_saturated"
    assert not Exchange.objects.filter(session_id=session["id"]).exists()
    queue._broker = None
