"""The session websocket: durable events exactly once and in order (also across a reconnect with
``after=``), live turn deltas, origin and credential checks (SPEC L5, O4)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import Client
from django.utils import timezone
from rest_framework_simplejwt.tokens import AccessToken

from loop.events import EventKind
from loop.models import Session, SessionEvent
from loop.providers.base import Delta, MessageEnd, ProviderRequest, TextDelta, UsageDelta
from loop.providers.loopback import text_turn, tool_turn
from skald.agents.seed import seed_agents
from skald.asgi import application
from skald.loop_adapters.translate import translate_event
from skald.sessions import services
from tests.conftest import make_user
from tests.skald.ws import refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://testserver")
WAIT = 10  # seconds a single expected message may take before the test fails


@pytest.fixture(autouse=True)
def sync_tasks(settings: Any) -> None:
    settings.SKALD_SYNC_TASKS = True  # a submitted message is driven inline, in the submitting thread


@pytest_asyncio.fixture(autouse=True)
async def close_consumer_connections() -> AsyncIterator[None]:
    """The consumer's database calls run on Channels' one sync thread: close its connection too."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.fixture
def session(alice: User) -> Session:
    seed_agents()
    return services.session_create(user=alice, title="disk")


def token_for(user: User) -> str:
    return str(AccessToken.for_user(user))


def communicator(session_id: int, *, user: User | None = None, after: int = 0,
                 headers: list[tuple[bytes, bytes]] | None = None) -> WebsocketCommunicator:
    query = f"after={after}" + (f"&token={token_for(user)}" if user is not None else "")
    return WebsocketCommunicator(application, f"/ws/sessions/{session_id}/?{query}",
                                 headers=[ORIGIN] if headers is None else headers)


def submit_in_thread(user: User, session: Session, content: str) -> threading.Thread:
    """Submit a message from a worker thread (which drives it inline) and close its connection."""

    def target() -> None:
        try:
            services.session_message_submit(user=user, session=session, content=content)
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


async def finished(thread: threading.Thread) -> None:
    await asyncio.to_thread(thread.join, WAIT)
    assert not thread.is_alive(), "the exchange did not finish"


@sync_to_async
def stored_events(session: Session) -> list[tuple[int, str]]:
    return list(SessionEvent.objects.filter(session=session).order_by("seq").values_list("seq", "kind"))


async def durable_until(comm: WebsocketCommunicator, last_seq: int, seen: list[dict[str, Any]]) -> None:
    """Receive into ``seen`` until the durable event ``last_seq`` arrives (deltas are skipped)."""
    while not seen or seen[-1]["seq"] < last_seq:
        message = await comm.receive_json_from(timeout=WAIT)
        if "seq" in message:
            seen.append(message)


def pairs(messages: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(m["seq"], m["kind"]) for m in messages]


def pausing(paused: threading.Event, resume: threading.Event, deltas: list[Delta]) -> Callable[..., list[Delta]]:
    """A scripted turn that holds the run until the test lets it go on."""

    def turn(request: ProviderRequest) -> list[Delta]:
        paused.set()
        assert resume.wait(WAIT), "the test never resumed the run"
        return deltas

    return turn


# --- admission ------------------------------------------------------------------------------------


async def test_it_refuses_a_foreign_or_missing_origin(alice, session):
    for headers in ([(b"origin", b"http://evil.example")], []):
        connected, _ = await communicator(session.pk, user=alice, headers=headers).connect()
        assert not connected


async def test_it_refuses_a_missing_or_invalid_token(alice, session):
    missing = await refusal(communicator(session.pk))
    forged = await refusal(WebsocketCommunicator(application, f"/ws/sessions/{session.pk}/?token=not-a-jwt",
                                                 headers=[ORIGIN]))
    assert missing == 4401 and forged == 4401


async def test_it_refuses_a_malformed_cursor(alice, session):
    comm = WebsocketCommunicator(application, f"/ws/sessions/{session.pk}/?after=x&token={token_for(alice)}",
                                 headers=[ORIGIN])
    assert await refusal(comm) == 4400


async def test_it_refuses_someone_elses_session_and_an_unknown_one(alice, bob, session):
    assert await refusal(communicator(session.pk, user=bob)) == 4404
    assert await refusal(communicator(session.pk + 1000, user=alice)) == 4404


async def test_it_refuses_a_user_without_a_role_even_on_their_own_session(alice):
    charlie = await sync_to_async(make_user)("charlie")
    await sync_to_async(seed_agents)()
    own = await sync_to_async(services.session_create)(user=charlie)
    assert await refusal(communicator(own.pk, user=charlie)) == 4403


async def test_it_accepts_a_logged_in_browser_session(alice, session):
    client = Client()
    await sync_to_async(client.force_login)(alice)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    comm = communicator(session.pk, headers=[ORIGIN, (b"cookie", cookie)])
    connected, _ = await comm.connect()
    assert connected
    await comm.disconnect()


# --- durable events ---------------------------------------------------------------------------------


@pytest.mark.db_sensitive
async def test_a_client_receives_the_durable_events_of_an_exchange_in_order(alice, session, script):
    script(tool_turn(("scratchpad_set", {"key": "disk", "value": "full"})), text_turn("the disk is full"))
    await finished(submit_in_thread(alice, session, "why is it slow?"))
    rows = await stored_events(session)

    comm = communicator(session.pk, user=alice)
    assert (await comm.connect())[0]
    seen: list[dict[str, Any]] = []
    await durable_until(comm, rows[-1][0], seen)
    await comm.disconnect()

    assert pairs(seen) == rows
    assert [m["type"] for m in seen] == ["message.user", "message.assistant", "tool.started", "tool.result",
                                         "tool.done", "message.assistant", "exchange.settled"]
    assert seen[0]["payload"]["content"] == "why is it slow?" and seen[-2]["payload"]["content"] == "the disk is full"


@pytest.mark.db_sensitive
async def test_a_reconnect_with_after_ends_with_every_durable_event_exactly_once_in_order(alice, session, script):
    paused, resume = threading.Event(), threading.Event()
    script(
        tool_turn(("scratchpad_set", {"key": "a", "value": "1"})),
        pausing(paused, resume, tool_turn(("scratchpad_set", {"key": "b", "value": "2"}))),
        tool_turn(("scratchpad_set", {"key": "c", "value": "3"})),
        text_turn("done"),
        delay=0.02,  # events keep arriving while the client reconnects
    )
    first = communicator(session.pk, user=alice)
    assert (await first.connect())[0]
    run = submit_in_thread(alice, session, "investigate")

    before: list[dict[str, Any]] = []
    await durable_until(first, 5, before)  # user + the first tool round, then the run holds
    assert await asyncio.to_thread(paused.wait, WAIT)
    await first.disconnect()
    resume.set()  # the run goes on while no client is connected

    second = communicator(session.pk, user=alice, after=before[-1]["seq"])
    assert (await second.connect())[0]
    await finished(run)
    rows = await stored_events(session)
    after: list[dict[str, Any]] = []
    await durable_until(second, rows[-1][0], after)
    await second.disconnect()

    assert pairs(before + after) == rows
    assert len({m["seq"] for m in before + after}) == len(rows) == 15
    assert rows[-2][1] == EventKind.ASSISTANT and after[-2]["payload"]["content"] == "done"
    assert rows[-1][1] == EventKind.EXCHANGE_SETTLED


@pytest.mark.db_sensitive
async def test_a_client_sees_a_stop_it_requested_as_a_canceled_event(alice, session, script):
    streaming = threading.Event()

    def slow(request: ProviderRequest) -> list[Delta]:
        streaming.set()
        return text_turn("never finished")

    script(slow, delay=10.0)
    comm = communicator(session.pk, user=alice)
    assert (await comm.connect())[0]
    run = submit_in_thread(alice, session, "take your time")
    assert await asyncio.to_thread(streaming.wait, WAIT)

    await comm.send_json_to({"type": "stop"})

    seen: list[dict[str, Any]] = []
    while not seen or seen[-1]["type"] != "exchange.settled":
        message = await comm.receive_json_from(timeout=WAIT)
        if "seq" in message:
            seen.append(message)
    await finished(run)
    await comm.disconnect()
    assert pairs(seen) == await stored_events(session)
    assert [m["kind"] for m in seen] == [EventKind.USER, EventKind.CANCELED, EventKind.EXCHANGE_SETTLED]


async def test_every_kind_of_durable_event_has_its_own_server_event_type():
    types = [translate_event(SessionEvent(seq=1, kind=kind, payload={}, created_at=timezone.now()))["type"]
             for kind in EventKind]
    assert "event" not in types and len(set(types)) == len(EventKind)


# --- live deltas --------------------------------------------------------------------------------------


async def test_turn_deltas_arrive_live_while_the_provider_streams(alice, session, script):
    script([TextDelta("the disk "), TextDelta("is "), TextDelta("full"), UsageDelta(10, 5), MessageEnd("stop")])
    comm = communicator(session.pk, user=alice)
    assert (await comm.connect())[0]
    run = submit_in_thread(alice, session, "why is it slow?")

    deltas: list[dict[str, Any]] = []
    answer: dict[str, Any] | None = None
    while answer is None or "".join(d["text"] for d in deltas) != "the disk is full":
        message = await comm.receive_json_from(timeout=WAIT)
        if message["type"] == "turn.delta":
            deltas.append(message)
        elif message["type"] == "message.assistant":
            answer = message
    await finished(run)
    await comm.disconnect()

    assert [d["text"] for d in deltas] == ["the disk ", "is ", "full"]
    assert all("seq" not in d and d["turn"] == 1 and d["exchange"] == answer["exchange"] for d in deltas)
    assert answer["payload"]["content"] == "the disk is full"
