"""The conversation REST API: scoping, idempotent messages, events, exchanges and stop (SPEC L4, L5, L12)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.events import EventKind
from loop.models import Exchange, ExchangeStatus, Outcome, Session, SessionEvent, ToolCall, ToolCallStatus
from loop.ports import GateCall, GateVerdict, TurnScope
from loop.providers.base import Delta, ProviderRequest
from loop.providers.loopback import text_turn, tool_turn
from skald.agents.seed import seed_agents
from skald.loop_adapters.runtime import set_gate_factory
from skald.tasks import run_kernel_turn

AWS_KEY_ID = "AKIA" + "ABCDEFGHIJKLMNOP"


@pytest.fixture(autouse=True)
def troubleshooter(db: None) -> None:
    seed_agents()


@pytest.fixture
def sync_tasks(settings: Any) -> None:
    settings.SKALD_SYNC_TASKS = True


class RequireWrites:
    """A gate that allows everything but parks ``write_file`` for a human."""

    def check(self, call: GateCall, scope: TurnScope | None) -> GateVerdict:
        return GateVerdict("require", "writes need approval") if call.tool == "write_file" else GateVerdict("allow")

    def park(self, call: GateCall, scope: TurnScope, verdict: GateVerdict) -> dict[str, Any]:
        return {"reason": verdict.reason}


@pytest.fixture
def writes_need_approval() -> Iterator[None]:
    set_gate_factory(RequireWrites)
    yield
    set_gate_factory(None)


def create_session(client: Any) -> dict[str, Any]:
    response = client.post("/api/sessions/", {}, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def send(client: Any, session_id: int, content: str, key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    return client.post(f"/api/sessions/{session_id}/messages/", {"content": content}, format="json", headers=headers)


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"code", "message", "extra"}
    assert body["code"] == code


def when(event: threading.Event, what: str) -> None:
    assert event.wait(10), f"timed out waiting until {what}"


def in_thread(fn: Callable[[], Any]) -> threading.Thread:
    """Run ``fn`` in a worker thread that closes its own database connection."""

    def target() -> None:
        try:
            fn()
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def signalling(event: threading.Event, deltas: list[Delta]) -> Callable[[ProviderRequest], list[Delta]]:
    """A scripted turn that tells the test the provider call has started."""

    def turn(request: ProviderRequest) -> list[Delta]:
        event.set()
        return deltas

    return turn


# --- sessions and scoping --------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_creates_a_session_with_the_default_agent_for_the_caller(alice, api):
    body = create_session(api(alice))
    assert body["agent"] == "troubleshooter" and body["owner"] == alice.pk
    assert body["last_seq"] == 0 and body["exchange_count"] == 0


@pytest.mark.django_db
def test_it_refuses_an_unknown_agent(alice, api):
    response = api(alice).post("/api/sessions/", {"agent": "nobody"}, format="json")
    assert_error(response, 404, "agent_unknown")
    assert not Session.objects.exists()


@pytest.mark.django_db
def test_a_user_sees_only_their_own_sessions_and_an_operator_sees_all(alice, bob, api):
    mine = create_session(api(alice))
    bobs = create_session(api(bob))

    assert [s["id"] for s in api(bob).get("/api/sessions/").json()] == [bobs["id"]]
    assert {s["id"] for s in api(alice).get("/api/sessions/").json()} == {mine["id"], bobs["id"]}
    assert api(alice).get(f"/api/sessions/{bobs['id']}/").json()["owner"] == bob.pk
    assert api(bob).get(f"/api/sessions/{bobs['id']}/").status_code == 200


@pytest.mark.django_db
def test_listing_sessions_costs_the_same_queries_for_one_or_many(alice, api):
    client = api(alice)
    create_session(client)
    with CaptureQueriesContext(connection) as one:
        assert len(client.get("/api/sessions/").json()) == 1
    for _ in range(4):
        create_session(client)
    with CaptureQueriesContext(connection) as many:
        assert len(client.get("/api/sessions/").json()) == 5
    assert len(many) == len(one)


@pytest.mark.django_db
def test_someone_elses_session_is_a_404_on_every_route(alice, bob, api):
    sid = create_session(api(alice))["id"]
    client = api(bob)
    for response in (
        client.get(f"/api/sessions/{sid}/"),
        client.get(f"/api/sessions/{sid}/events/"),
        client.get(f"/api/sessions/{sid}/exchanges/1/"),
        send(client, sid, "hello"),
        client.post(f"/api/sessions/{sid}/stop/"),
    ):
        assert_error(response, 404, "session_not_found")
    assert not Exchange.objects.exists()


@pytest.mark.django_db
def test_it_answers_401_without_credentials_and_403_without_a_role(alice, charlie, api):
    sid = create_session(api(alice))["id"]
    for client, status, code in ((api(None), 401, "not_authenticated"), (api(charlie), 403, "permission_denied")):
        assert_error(client.get("/api/sessions/"), status, code)
        assert_error(client.post("/api/sessions/", {}, format="json"), status, code)
        assert_error(client.get(f"/api/sessions/{sid}/"), status, code)
        assert_error(send(client, sid, "hello"), status, code)
        assert_error(client.post(f"/api/sessions/{sid}/stop/"), status, code)
    assert Session.objects.count() == 1 and not Exchange.objects.exists()


@pytest.mark.django_db
def test_an_unknown_exchange_is_a_404(alice, api):
    sid = create_session(api(alice))["id"]
    assert_error(api(alice).get(f"/api/sessions/{sid}/exchanges/999/"), 404, "exchange_not_found")


# --- messages ----------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_a_message_is_accepted_with_its_exchange_and_settles_with_a_receipt(alice, api, script, sync_tasks):
    provider = script(text_turn("all good"))
    client = api(alice)
    sid = create_session(client)["id"]

    response = send(client, sid, "is the disk full?")

    assert response.status_code == 202
    exchange = response.json()
    assert exchange["session"] == sid and exchange["number"] == 1 and exchange["request_key"]
    detail = client.get(f"/api/sessions/{sid}/exchanges/{exchange['id']}/").json()
    assert (detail["status"], detail["outcome"]) == ("settled", "completed")
    receipt = detail["receipt"]
    assert receipt["outcome"] == "completed" and receipt["detail"] == {"answer": "all good"}
    rows = list(SessionEvent.objects.filter(exchange_id=exchange["id"]).order_by("seq").values_list("seq", "kind"))
    assert rows == [(1, EventKind.USER), (2, EventKind.ASSISTANT), (3, EventKind.EXCHANGE_SETTLED)]
    assert (receipt["events"], receipt["first_seq"], receipt["last_seq"]) == (3, 1, 3)
    assert provider.calls[0].messages[-1].content == "is the disk full?"


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_the_same_idempotency_key_returns_the_same_exchange_and_does_no_new_work(alice, api, script, sync_tasks):
    provider = script(text_turn("once"))
    client = api(alice)
    sid = create_session(client)["id"]

    first = send(client, sid, "check the logs", key="retry-1")
    again = send(client, sid, "check the logs", key="retry-1")

    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["receipt"] == first.json()["receipt"] is not None
    assert first.json()["request_key"] == "retry-1"
    assert len(provider.calls) == 1
    assert Exchange.objects.count() == 1
    assert SessionEvent.objects.filter(kind=EventKind.USER).count() == 1


@pytest.mark.django_db
def test_an_overlong_idempotency_key_is_refused(alice, api):
    sid = create_session(api(alice))["id"]
    assert_error(send(api(alice), sid, "hello", key="k" * 129), 400, "idempotency_key_invalid")
    assert not Exchange.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("content", ["", "   \n"])
def test_an_empty_message_is_refused(alice, api, content):
    sid = create_session(api(alice))["id"]
    assert_error(send(api(alice), sid, content), 400, "message_invalid")
    assert not Exchange.objects.exists()


@pytest.mark.django_db
def test_a_message_without_content_is_invalid(alice, api):
    sid = create_session(api(alice))["id"]
    response = api(alice).post(f"/api/sessions/{sid}/messages/", {}, format="json")
    assert_error(response, 400, "invalid")
    assert "content" in response.json()["extra"]["fields"]


@pytest.mark.django_db
def test_a_credential_in_the_message_is_refused_and_nothing_is_stored(alice, api):
    sid = create_session(api(alice))["id"]

    response = send(api(alice), sid, f"my key is {AWS_KEY_ID}, why does S3 refuse it?")

    assert_error(response, 400, "credential_tripwire")
    assert response.json()["extra"]["kinds"] == ["aws-access-token"]
    assert AWS_KEY_ID not in response.content.decode()
    assert not Exchange.objects.exists() and not SessionEvent.objects.exists()
    assert Session.objects.get(pk=sid).last_seq == 0
    # The refusal itself is audited: where, which kinds, how big — never the text.
    (refusal,) = AuditEvent.objects.filter(kind=AuditKind.TRIPWIRE_REFUSED)
    text = f"my key is {AWS_KEY_ID}, why does S3 refuse it?"
    assert json.loads(refusal.payload) == {"where": "chat_message", "kinds": ["aws-access-token"], "bytes": len(text)}
    assert (refusal.subject_type, refusal.subject_id, refusal.actor_id) == ("session", str(sid), str(alice.pk))
    assert AWS_KEY_ID not in refusal.payload


@pytest.mark.django_db
@pytest.mark.db_sensitive
def test_a_message_while_an_exchange_is_active_is_refused_as_busy(alice, api, settings):
    settings.SKALD_SYNC_TASKS = False  # nothing drives the first exchange
    client = api(alice)
    sid = create_session(client)["id"]
    first = send(client, sid, "first", key="k1")
    assert first.status_code == 202 and first.json()["status"] == "open"

    assert_error(send(client, sid, "second", key="k2"), 409, "session_busy")
    assert send(client, sid, "first", key="k1").json()["id"] == first.json()["id"]  # a retry is not busy
    assert Exchange.objects.count() == 1


# --- events --------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_events_are_paged_in_order_after_a_sequence(alice, api, script, sync_tasks):
    script(tool_turn(("scratchpad_set", {"key": "disk", "value": "full"})), text_turn("the disk is full"))
    client = api(alice)
    sid = create_session(client)["id"]
    assert send(client, sid, "why is it slow?").status_code == 202
    stored = list(SessionEvent.objects.filter(session_id=sid).order_by("seq").values_list("seq", "kind"))
    assert [kind for _, kind in stored] == [
        EventKind.USER, EventKind.ASSISTANT, EventKind.TOOL_INTENT, EventKind.TOOL_RESULT, EventKind.TOOL_DONE,
        EventKind.ASSISTANT, EventKind.EXCHANGE_SETTLED,
    ]

    seen: list[tuple[int, str]] = []
    after, pages = 0, 0
    while True:
        page = client.get(f"/api/sessions/{sid}/events/", {"after": after, "limit": 4}).json()
        seen += [(event["seq"], event["kind"]) for event in page["results"]]
        after, pages = page["last_seq"], pages + 1
        if not page["more"]:
            break

    assert seen == stored and pages == 2
    tail = client.get(f"/api/sessions/{sid}/events/", {"after": stored[-1][0]}).json()
    assert tail == {"results": [], "last_seq": stored[-1][0], "more": False}


@pytest.mark.django_db
def test_events_refuse_a_malformed_cursor(alice, api):
    sid = create_session(api(alice))["id"]
    assert_error(api(alice).get(f"/api/sessions/{sid}/events/", {"after": "x"}), 400, "invalid")
    assert_error(api(alice).get(f"/api/sessions/{sid}/events/", {"limit": "-1"}), 400, "invalid")


# --- stop -------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_stop_on_an_idle_session_stops_nothing(alice, api):
    sid = create_session(api(alice))["id"]
    response = api(alice).post(f"/api/sessions/{sid}/stop/")
    assert response.status_code == 200 and response.json() == {"stopped": None}


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_stop_cancels_a_running_exchange(alice, api, script, settings):
    settings.SKALD_SYNC_TASKS = False  # the test drives the worker itself
    streaming = threading.Event()
    provider = script(signalling(streaming, text_turn("never finished")), delay=10.0)
    client = api(alice)
    sid = create_session(client)["id"]
    exchange_id = send(client, sid, "take your time").json()["id"]
    worker = in_thread(lambda: run_kernel_turn(exchange_id))
    when(streaming, "the provider streams")

    response = client.post(f"/api/sessions/{sid}/stop/")

    assert response.status_code == 202
    assert response.json()["id"] == exchange_id and response.json()["cancel_requested_at"]
    worker.join(10)
    assert not worker.is_alive()
    exchange = Exchange.objects.get(pk=exchange_id)
    assert (exchange.status, exchange.outcome) == (ExchangeStatus.SETTLED, Outcome.CANCELED)
    assert exchange.receipt["outcome"] == "canceled"
    kinds = list(SessionEvent.objects.filter(session_id=sid).order_by("seq").values_list("kind", flat=True))
    assert kinds == [EventKind.USER, EventKind.CANCELED, EventKind.EXCHANGE_SETTLED]
    assert len(provider.calls) == 1
    assert send(client, sid, "next question").status_code == 202  # the session is free again


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_stop_before_a_worker_picks_the_exchange_up_cancels_it_without_a_provider_call(alice, api, script, settings):
    settings.SKALD_SYNC_TASKS = False
    provider = script(text_turn("too late"))
    client = api(alice)
    sid = create_session(client)["id"]
    exchange_id = send(client, sid, "queued").json()["id"]

    assert client.post(f"/api/sessions/{sid}/stop/").status_code == 202
    run_kernel_turn(exchange_id)  # the worker arrives after the stop

    detail = client.get(f"/api/sessions/{sid}/exchanges/{exchange_id}/").json()
    assert (detail["status"], detail["outcome"]) == ("settled", "canceled")
    assert provider.calls == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.db_sensitive
def test_stop_settles_a_parked_exchange_as_canceled(alice, api, script, sync_tasks, writes_need_approval):
    script(tool_turn(("write_file", {"path": "notes.md", "content": "x"})))
    client = api(alice)
    sid = create_session(client)["id"]
    parked = send(client, sid, "write it down").json()
    assert (parked["status"], parked["outcome"]) == ("parked", "awaiting_human")
    assert_error(send(client, sid, "anything else?"), 409, "session_awaiting_human")

    response = client.post(f"/api/sessions/{sid}/stop/")

    assert response.status_code == 202
    body = response.json()
    assert (body["id"], body["status"], body["outcome"]) == (parked["id"], "settled", "canceled")
    assert body["receipt"]["outcome"] == "canceled"
    assert ToolCall.objects.get(exchange_id=parked["id"]).status == ToolCallStatus.CANCELED
    assert client.post(f"/api/sessions/{sid}/stop/").json() == {"stopped": None}
