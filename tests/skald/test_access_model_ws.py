"""The session access model over the websocket (docs/access-model.md): the same table as REST for
connecting (read) and for the ``stop`` frame, decided by the same rule (skald.sessions.access)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connections
from rest_framework_simplejwt.tokens import AccessToken

from loop.models import Exchange
from skald.agents.seed import seed_agents
from skald.asgi import application
from skald.sessions import services
from tests.conftest import make_user
from tests.skald.test_access_model import CALLERS, CONVERSING, READ_ANY, STOP_ANY
from tests.skald.ws import refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://testserver")
WAIT = 10


@pytest_asyncio.fixture(autouse=True)
async def close_consumer_connections() -> AsyncIterator[None]:
    yield
    await sync_to_async(connections.close_all)()


@sync_to_async
def setup_world(caller: str, whose: str) -> tuple[User | None, int, int]:
    seed_agents()
    user = make_user(caller, *CALLERS[caller]) if caller != "anonymous" else None
    owner = user if whose == "own" and user is not None else make_user("owen", "workflow")
    session = services.session_create(user=owner, title="t")
    exchange, _ = services.session_message_submit(user=owner, session=session, content="first")
    return user, session.pk, exchange.pk


def connect(session_id: int, user: User | None) -> WebsocketCommunicator:
    token = f"&token={AccessToken.for_user(user)}" if user is not None else ""
    return WebsocketCommunicator(application, f"/ws/sessions/{session_id}/?after=0{token}", headers=[ORIGIN])


@pytest.mark.parametrize("whose", ["own", "other"])
@pytest.mark.parametrize("caller", sorted(CALLERS))
async def test_connect_and_stop_follow_the_access_table(caller, whose):
    user, session_id, exchange_id = await setup_world(caller, whose)
    comm = connect(session_id, user)
    own = whose == "own"
    if caller == "anonymous":
        assert await refusal(comm) == 4401
        return
    if caller == "charlie":
        assert await refusal(comm) == 4403
        return
    if not (own or caller in READ_ANY):
        assert await refusal(comm) == 4404
        return
    connected, _ = await comm.connect()
    assert connected
    await comm.send_json_to({"type": "stop"})
    while True:  # stored events stream first; the answer to the frame follows them
        message = await comm.receive_json_from(timeout=WAIT)
        if message.get("type") in ("stop.accepted", "error"):
            break
    may_stop = (own and caller in CONVERSING) or caller in STOP_ANY
    status = await sync_to_async(lambda: Exchange.objects.get(pk=exchange_id).cancel_requested_at)()
    if may_stop:
        assert message["type"] == "stop.accepted" and status is not None
    else:
        assert (message["type"], message["code"]) == ("error", "session_stop_forbidden") and status is None
    await comm.disconnect()


async def test_a_session_id_beyond_64_bits_is_4404_not_a_crash():
    user, _, _ = await setup_world("alice", "own")
    assert await refusal(connect(2**63, user)) == 4404
    assert await refusal(connect(2**70, user)) == 4404


async def test_an_after_cursor_beyond_64_bits_is_4400():
    user, session_id, _ = await setup_world("alice", "own")
    comm = WebsocketCommunicator(application, f"/ws/sessions/{session_id}/?after={2**64}&token="
                                 f"{AccessToken.for_user(user)}", headers=[ORIGIN])
    assert await refusal(comm) == 4400


