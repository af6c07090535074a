"""A session's websocket acts only on its own session (issue 28 §7): an ``approval.resolve`` frame
sent on session A's socket cannot resolve session B's parked call, even for an approver of both; and
its refusals arrive as close codes. On both databases."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework_simplejwt.tokens import AccessToken

from approvals.models import ApprovalStatus, PendingApproval
from loop.providers.loopback import text_turn, tool_turn
from skald.asgi import application
from skald.sessions.services import session_create, session_message_submit
from tests.conftest import make_user
from tests.skald.ws import refusal

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.db_sensitive]

ORIGIN = (b"origin", b"http://testserver")
WAIT = 10.0  # a hang guard, not a time assertion
WRITE = ("write_file", {"path": "reports/findings.md", "content": "# Findings\n"})


@pytest_asyncio.fixture(autouse=True)
async def close_consumer_connections() -> AsyncIterator[None]:
    yield
    await sync_to_async(connections.close_all)()


def two_sessions_one_parked(script):  # type: ignore[no-untyped-def]
    from approvals.rules.seed import default_rules_ensure
    from skald.agents.seed import seed_agents
    from skald.loop_adapters.discovery import forget_seen

    seed_agents()
    default_rules_ensure()
    forget_seen()
    erin = make_user("erin", "operator", "approver")
    quiet = session_create(user=erin, agent="troubleshooter", title="quiet")
    parked = session_create(user=erin, agent="troubleshooter", title="parked")
    script(tool_turn(WRITE), text_turn("written"))
    session_message_submit(user=erin, session=parked, content="write the findings")
    approval = PendingApproval.objects.get(session=parked)
    return erin, quiet, parked, approval


async def _answer(comm: WebsocketCommunicator, frame: dict) -> dict:
    await comm.send_json_to(frame)
    while (message := await comm.receive_json_from(timeout=WAIT)).get("type") not in ("error", "approval.accepted"):
        pass
    return message


async def test_a_resolve_frame_on_another_sessions_socket_is_refused(script, inline_tasks, workspace_root) -> None:
    erin, quiet, parked, approval = await sync_to_async(two_sessions_one_parked)(script)
    token = str(AccessToken.for_user(erin))
    frame = {"type": "approval.resolve", "request_id": str(approval.request_id), "decision": "approve"}

    elsewhere = WebsocketCommunicator(application, f"/ws/sessions/{quiet.pk}/?after=0&token={token}",
                                      headers=[ORIGIN])
    assert (await elsewhere.connect(timeout=WAIT))[0]
    answer = await _answer(elsewhere, frame)
    await elsewhere.disconnect()
    assert answer["type"] == "error" and answer["code"] == "approval_not_found"
    assert (await sync_to_async(PendingApproval.objects.get)(pk=approval.pk)).status == ApprovalStatus.PENDING

    own = WebsocketCommunicator(application, f"/ws/sessions/{parked.pk}/?after=0&token={token}", headers=[ORIGIN])
    assert (await own.connect(timeout=WAIT))[0]
    answer = await _answer(own, frame)
    await own.disconnect()
    assert answer["type"] == "approval.accepted" and answer["status"] == ApprovalStatus.APPROVED


async def test_a_reject_frame_without_a_reason_is_refused_on_the_socket(script, inline_tasks, workspace_root) -> None:
    """The console card's socket goes through the same service: ``reason_required``, nothing resolved."""
    erin, _quiet, parked, approval = await sync_to_async(two_sessions_one_parked)(script)
    token = str(AccessToken.for_user(erin))
    own = WebsocketCommunicator(application, f"/ws/sessions/{parked.pk}/?after=0&token={token}", headers=[ORIGIN])
    assert (await own.connect(timeout=WAIT))[0]
    answer = await _answer(own, {"type": "approval.resolve", "request_id": str(approval.request_id),
                                 "decision": "reject", "reason": "  "})
    await own.disconnect()
    assert answer["type"] == "error" and answer["code"] == "reason_required"
    assert (await sync_to_async(PendingApproval.objects.get)(pk=approval.pk)).status == ApprovalStatus.PENDING


async def test_refusals_arrive_as_close_codes_after_accept(script, inline_tasks, workspace_root) -> None:
    erin, quiet, _parked, _approval = await sync_to_async(two_sessions_one_parked)(script)
    frank = await sync_to_async(make_user)("frank", "reviewer")  # may not read erin's sessions
    for query, code in ((f"/ws/sessions/{quiet.pk}/?after=0", 4401),
                        (f"/ws/sessions/{quiet.pk}/?after=0&token={AccessToken.for_user(frank)}", 4404),
                        (f"/ws/sessions/{quiet.pk}/?after=-x&token={AccessToken.for_user(erin)}", 4400)):
        assert await refusal(WebsocketCommunicator(application, query, headers=[ORIGIN])) == code, query
