"""The admin's live socket: a committed change of a topic reaches the pages that show it, once per
transaction, never for a rolled-back change, and only for topics the viewer may open."""

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
from django.db import connection, connections, transaction
from django.test import Client

from audit.actors import Actor
from audit.kinds import AuditKind
from audit.services import audit_append
from skald.asgi import application
from skald.loop_adapters.store import kernel_store
from tests.skald.ws import refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

ORIGIN = (b"origin", b"http://testserver")
WAIT = 10  # a hang guard for one expected message, not a time assertion


@pytest_asyncio.fixture(autouse=True)
async def close_consumer_connections() -> AsyncIterator[None]:
    yield
    await sync_to_async(connections.close_all)()


def cookie_for(user: User) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def socket(topics: str, user: User | None = None) -> WebsocketCommunicator:
    headers = [ORIGIN]
    if user is not None:
        headers.append((b"cookie", await sync_to_async(cookie_for)(user)))
    return WebsocketCommunicator(application, f"/ws/admin/live/?topics={topics}", headers=headers)


def write(*kinds: AuditKind, roll_back: bool = False) -> None:
    """One transaction with an audit row per kind, committed (or rolled back) from another thread,
    as a view or a worker does."""

    class Undo(Exception):
        pass

    def target() -> None:
        try:
            with transaction.atomic():
                for kind in kinds:
                    audit_append(actor=Actor("user", "1"), kind=kind, subject_type="approval", subject_id="r1",
                                 payload={})
                if roll_back:
                    raise Undo
        except Undo:
            pass
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join()


async def in_thread(call: Callable[[], Any]) -> None:
    await asyncio.get_running_loop().run_in_executor(None, call)


async def test_a_committed_change_reaches_the_queue_once_per_transaction(carol: User) -> None:
    ws = await socket("approvals,proposals", carol)
    connected, _ = await ws.connect()
    assert connected
    assert await ws.receive_json_from(WAIT) == {"type": "joined", "topics": ["approvals"]}  # no proposals for her
    await in_thread(lambda: write(AuditKind.APPROVAL_REQUESTED, roll_back=True))
    await in_thread(lambda: write(AuditKind.APPROVAL_REQUESTED, AuditKind.APPROVAL_REQUESTED))
    await in_thread(lambda: write(AuditKind.PROPOSAL_CAPTURED))  # not her topic
    await in_thread(lambda: write(AuditKind.APPROVAL_RESOLVED))
    # In order: the rolled-back row said nothing, two rows in one transaction said it once, the
    # proposal was not hers; the resolution is the marker that everything before it was delivered.
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "approvals",
                                                "kind": "approvals.approval.requested"}
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "approvals",
                                                "kind": "approvals.approval.resolved"}
    await ws.disconnect()


async def test_every_governance_role_may_follow_runs(carol: User) -> None:
    ws = await socket("runs,audit", carol)  # runs are every role's context; the audit trail is not hers
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(WAIT))["topics"] == ["runs"]
    await ws.disconnect()


async def test_the_auditor_hears_every_governance_change(dave: User) -> None:
    ws = await socket("audit", dave)
    assert (await ws.connect())[0]
    assert (await ws.receive_json_from(WAIT))["topics"] == ["audit"]
    await in_thread(lambda: write(AuditKind.TURN_ENDED))  # loop rows: the run page's own socket
    await in_thread(lambda: write(AuditKind.RUN_STATUS_CHANGED))
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "audit",
                                                "kind": "skald.run.status_changed"}
    await ws.disconnect()


@pytest.mark.parametrize(("who", "topics", "code"), [
    (None, "approvals", 4401),
    ("carol", "approvals,nonsense", 4400),
    ("carol", "", 4400),
    ("bob", "approvals", 4403),
])
async def test_it_refuses_whoever_may_not_follow_the_topics(request: pytest.FixtureRequest, who: str | None,
                                                             topics: str, code: int) -> None:
    user = await sync_to_async(request.getfixturevalue)(who) if who else None
    ws = await socket(topics, user)
    assert await refusal(ws) == code


async def test_the_console_hears_a_new_session_and_nothing_of_its_turns(bob: User) -> None:
    """The console's session list follows "sessions": a session created anywhere announces itself
    once committed (whoever watches re-reads the list it may see); the turns inside do not."""
    ws = await socket("sessions,approvals", bob)  # a reviewer: approvals are not his to follow
    assert (await ws.connect())[0]
    assert await ws.receive_json_from(WAIT) == {"type": "joined", "topics": ["sessions"]}
    await in_thread(lambda: write(AuditKind.TURN_ENDED))

    def create() -> None:
        try:
            kernel_store().create_session(owner_id=bob.pk, agent="troubleshooter", source="web", title="Checkout",
                                          principal=f"user:{bob.pk}")
        finally:
            connection.close()

    await in_thread(create)
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "sessions",
                                                "kind": "loop.session.created"}
    assert await ws.receive_nothing()
    await ws.disconnect()


async def test_an_approval_asked_for_tells_the_session_list_of_someone_without_the_approvals_topic(
        bob: User) -> None:
    """The console's "waiting for an approver" badges (issue 35): a reviewer, who may not follow
    approvals, still hears that the session list changed when a call parks or is answered."""
    ws = await socket("sessions", bob)
    assert (await ws.connect())[0]
    assert await ws.receive_json_from(WAIT) == {"type": "joined", "topics": ["sessions"]}
    await in_thread(lambda: write(AuditKind.APPROVAL_REQUESTED))
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "sessions",
                                                "kind": "approvals.approval.requested"}
    await in_thread(lambda: write(AuditKind.APPROVAL_RESOLVED))
    assert await ws.receive_json_from(WAIT) == {"type": "changed", "topic": "sessions",
                                                "kind": "approvals.approval.resolved"}
    await ws.disconnect()
