"""Recovery through the product's entry points (SPEC R2, R3): the outbox, the sweep, a stop that
always takes effect, a bounded message, and a websocket connect that resumes a dead worker's turn."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import connections
from rest_framework_simplejwt.tokens import AccessToken

from loop.models import Exchange, ExchangeStatus, SessionEvent, ToolCall, ToolCallStatus, Work
from loop.providers.base import fold_deltas
from loop.providers.loopback import text_turn, tool_turn
from skald.agents.seed import seed_agents
from skald.asgi import application
from skald.core import clock
from skald.loop_adapters.runtime import build_env
from skald.loop_adapters.store import kernel_store
from skald.sessions import services
from skald.tasks import sweep

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

WAIT = 10


@pytest.fixture(autouse=True)
def troubleshooter(db: None) -> None:
    seed_agents()


def lapse(exchange_id: int) -> None:
    """The worker holding it died: its lease ran out a while ago."""
    Exchange.objects.filter(pk=exchange_id).update(lease_until=clock.now() - timedelta(seconds=60))


def crashed_mid_call(session: Any, *calls: tuple[str, dict[str, Any]]) -> Exchange:
    env = build_env(session)
    exchange = env.store.exchanges.admit(session_id=session.pk, request_key="crashed", content="look",
                                         principal=env.principal, config={}, claim_token="dead-worker").exchange
    env.store.exchanges.record_message_end(exchange=exchange, frame=env.store.exchanges.root_frame(exchange), turn=1,
                                           assembled=fold_deltas(tool_turn(*calls)), principal=env.principal,
                                           spent_tokens=0, journal=1)
    lapse(exchange.pk)
    return exchange


def test_a_message_is_recorded_as_work_and_a_lost_task_is_sent_again_by_the_sweep(alice, settings, script):
    settings.SKALD_SYNC_TASKS = False  # the broker "loses" the task: nothing runs it
    script(text_turn("hello"))
    session = services.session_create(user=alice)
    exchange, _ = services.session_message_submit(user=alice, session=session, content="hi")
    work = Work.objects.get(key=f"drive:e{exchange.pk}")
    assert work.done_at is None and work.task == "skald.tasks.run_kernel_turn"

    settings.SKALD_SYNC_TASKS = True  # a worker runs the sweep (inline here)
    assert sweep()["work"] == 1
    assert Exchange.objects.get(pk=exchange.pk).outcome == "completed"
    assert Work.objects.get(pk=work.pk).done_at is not None
    assert sweep() == {"work": 0, "exchanges": 0, "runs": 0, "notices": 0, "deliveries": 0}


def test_the_sweep_recovers_a_turn_whose_worker_died_mid_call(alice, settings, script, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    provider = script(text_turn("the notes are empty"))
    session = services.session_create(user=alice)
    exchange = crashed_mid_call(session, ("read_file", {"path": "notes.md"}))

    assert sweep()["exchanges"] == 1

    recovered = Exchange.objects.get(pk=exchange.pk)
    assert (recovered.status, recovered.outcome) == (ExchangeStatus.SETTLED, "completed")
    call = ToolCall.objects.get(exchange=exchange)
    # Re-gated (the rules decide again), never marked interrupted: read_file may run twice.
    assert call.status in (ToolCallStatus.COMPLETED, ToolCallStatus.FAILED, ToolCallStatus.REJECTED)
    assert provider.calls[0].messages[-1].name == "read_file"


def test_a_65536_byte_message_is_refused_with_a_stable_code_and_nothing_stored(alice, api, settings):
    settings.SKALD_SYNC_TASKS = True
    client = api(alice)
    session = client.post("/api/sessions/", {}, format="json").json()
    response = client.post(f"/api/sessions/{session['id']}/messages/", {"content": "x" * 65536}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "message_too_large"
    assert not Exchange.objects.filter(session_id=session["id"]).exists()
    assert not SessionEvent.objects.filter(session_id=session["id"]).exists()


def test_a_stop_settles_an_exchange_no_worker_has_picked_up(alice, settings):
    settings.SKALD_SYNC_TASKS = False
    session = services.session_create(user=alice)
    exchange, _ = services.session_message_submit(user=alice, session=session, content="hi")
    stopped = services.session_stop(user=alice, session=session)
    assert (stopped.status, stopped.outcome) == (ExchangeStatus.SETTLED, "canceled")
    settings.SKALD_SYNC_TASKS = True
    sweep()  # the queued drive finds it settled: nothing runs
    assert Exchange.objects.get(pk=exchange.pk).outcome == "canceled"


def test_a_stop_settles_a_turn_whose_worker_died_with_its_calls(alice, settings, tmp_path):
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    session = services.session_create(user=alice)
    exchange = crashed_mid_call(session, ("read_file", {"path": "a"}), ("read_file", {"path": "b"}))
    stopped = services.session_stop(user=alice, session=session)
    assert (stopped.status, stopped.outcome) == (ExchangeStatus.SETTLED, "canceled")
    assert set(ToolCall.objects.filter(exchange=exchange).values_list("status", flat=True)) == {
        ToolCallStatus.CANCELED}
    last = SessionEvent.objects.filter(exchange=exchange).order_by("-seq").first()
    assert stopped.receipt["last_seq"] == last.seq


@pytest.mark.asyncio
async def test_a_websocket_connect_resumes_a_session_whose_worker_died(alice: User, settings, script, tmp_path):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path
    script(text_turn("picked up where it stopped"))
    session = await sync_to_async(services.session_create)(user=alice)
    exchange = await sync_to_async(crashed_mid_call)(session, ("read_file", {"path": "notes.md"}))
    comm = WebsocketCommunicator(application, f"/ws/sessions/{session.pk}/?after=0&token={AccessToken.for_user(alice)}",
                                 headers=[(b"origin", b"http://testserver")])
    connected, _ = await comm.connect()
    assert connected
    kinds: list[str] = []
    while "control:exchange_settled" not in kinds:  # the browser sends nothing
        message = await comm.receive_json_from(timeout=WAIT)
        if "seq" in message:
            kinds.append(message["kind"])
    await comm.disconnect()
    assert "tool_result" in kinds and kinds[-2] == "assistant"
    settled = await sync_to_async(Exchange.objects.get)(pk=exchange.pk)
    assert settled.outcome == "completed"
    await sync_to_async(connections.close_all)()


def test_kernel_store_lease_follows_the_setting(settings):
    kernel_store.cache_clear()
    settings.SKALD_LEASE_SECONDS = 7
    try:
        assert kernel_store().lease_seconds == 7
    finally:
        kernel_store.cache_clear()
