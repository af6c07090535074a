"""``TaskUpdate`` over the websocket (SPEC S5): a job's state changes reach the viewers of its parent
conversation as ``task.update`` events, and only them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework_simplejwt.tokens import AccessToken

from skald.agents.seed import seed_agents
from skald.asgi import application
from skald.jobs.classify import Ending
from skald.jobs.services import job_run_finish, job_run_start, job_submit_task
from skald.sessions.services import session_create

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest_asyncio.fixture(autouse=True)
async def close_consumer_connections() -> AsyncIterator[None]:
    yield
    await sync_to_async(connections.close_all)()


def _start(alice: Any) -> tuple[int, int]:
    seed_agents()
    parent = session_create(user=alice, title="parent")
    other = session_create(user=alice, title="other")
    job = job_submit_task(owner_id=alice.pk, source="web", parent_session_id=parent.pk, parent_exchange_id=None,
                          parent_call_id=None, agent="log-analyst", task="look", tools=[], client="",
                          selection={}, scope_extras={})
    run = job_run_start(job_id=job.pk)
    assert run is not None
    job_run_finish(run_id=run.pk, ending=Ending("failed", "provider_failed", "upstream 503"))
    return parent.pk, other.pk


async def updates(session_id: int, user: Any) -> list[dict[str, Any]]:
    token = str(AccessToken.for_user(user))
    ws = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/?after=0&token={token}",
                               headers=[(b"origin", b"http://testserver")])
    connected, _ = await ws.connect()
    assert connected
    seen: list[dict[str, Any]] = []
    while not await ws.receive_nothing(timeout=1.0):
        message = await ws.receive_json_from()
        if message["type"] == "task.update":
            seen.append(message["payload"])
    await ws.disconnect()
    return seen


async def test_task_updates_reach_the_parent_conversation_only(alice):
    parent, other = await sync_to_async(_start)(alice)
    seen = await updates(parent, alice)
    assert [(u["status"], u["agent"]) for u in seen] == [("queued", "log-analyst"), ("running", "log-analyst"),
                                                         ("failed", "log-analyst")]
    assert seen[-1]["error"] == "upstream 503" and seen[-1]["kind"] == "task"
    assert await updates(other, alice) == []
