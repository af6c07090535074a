"""Elicitation against a real MCP server (stdio, the SDK's server API): the server's ``ask`` tool asks
the user where to deploy; the request becomes a card for the session's owner, answered through the API.

The exchange runs inline on a thread of the test (it waits for the answer); the test waits for the
card's row, answers, and joins the thread. The waits are bounded only to report a failure.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, ToolCall
from loop.providers.loopback import text_turn, tool_turn
from skald.mcp.models import McpElicitation, McpElicitationStatus
from tests.conftest import make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def root(db: None) -> Any:
    return make_user("root", superuser=True)


class Background:
    """``ask(content)`` on a thread of its own; ``exchange()`` joins it."""

    def __init__(self, ask: Callable[[str], Exchange], content: str) -> None:
        self.result: list[Any] = []
        self.thread = threading.Thread(target=self._run, args=(ask, content), daemon=True)
        self.thread.start()

    def _run(self, ask: Callable[[str], Exchange], content: str) -> None:
        try:
            self.result.append(ask(content))
        except BaseException as exc:
            self.result.append(exc)
        finally:
            connection.close()

    def exchange(self) -> Exchange:
        self.thread.join(60)
        assert not self.thread.is_alive(), "the exchange never ended"
        outcome = self.result[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def the_card(background: Background) -> McpElicitation:
    """The pending card, once the server's request reached it (polled: it is written by the pool's thread)."""
    found = threading.Event()
    for _ in range(3000):
        row = McpElicitation.objects.filter(status=McpElicitationStatus.PENDING).first()
        if row is not None:
            return row
        if not background.thread.is_alive():
            break
        found.wait(0.02)
    raise AssertionError(f"no card: {background.result}")


@pytest.fixture
def deploy(stdio_server: Callable[..., Any], script: Callable[..., Any], ask: Callable[[str], Exchange]
           ) -> Iterator[Callable[[], tuple[Background, Any]]]:
    stdio_server()

    def start() -> tuple[Background, Any]:
        provider = script(tool_turn(("mcp__demo__ask", {})), text_turn("done"))
        return Background(ask, "deploy it"), provider

    yield start


def test_an_accepted_answer_reaches_the_server_and_both_are_audited(deploy, api, alice):
    background, provider = deploy()
    card = the_card(background)
    assert card.message == "Where should I deploy?"
    assert set(card.requested_schema["properties"]) == {"target", "replicas"}
    assert card.tool == "mcp__demo__ask" and card.server == "demo"

    response = api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer",
                               {"action": "accept", "content": {"target": "eu-1", "replicas": 2}}, format="json")

    assert response.status_code == 200, response.content
    assert response.json()["status"] == "accepted"
    exchange = background.exchange()
    assert exchange.outcome == "completed"
    assert "deploying to eu-1 x2" in provider.calls[1].messages[-1].content
    card.refresh_from_db()
    assert (card.status, card.answer, card.answered_by) == ("accepted", {"target": "eu-1", "replicas": 2},
                                                            f"user:{alice.pk}")
    kinds = list(AuditEvent.objects.filter(subject_type="mcp_elicitation", subject_id=str(card.pk))
                 .order_by("seq").values_list("kind", flat=True))
    assert kinds == [AuditKind.MCP_ELICITATION_REQUESTED, AuditKind.MCP_ELICITATION_ANSWERED]


def test_a_declined_card_is_declined_to_the_server_and_an_admin_may_answer(deploy, api, root):
    background, provider = deploy()
    card = the_card(background)

    response = api(root).post(f"/api/mcp/elicitations/{card.pk}/answer", {"action": "decline"}, format="json")

    assert response.status_code == 200, response.content
    background.exchange()
    assert "not deploying (decline)" in provider.calls[1].messages[-1].content
    again = api(root).post(f"/api/mcp/elicitations/{card.pk}/answer", {"action": "cancel"}, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "mcp_elicitation_settled")


def test_only_the_sessions_owner_or_an_admin_may_answer(deploy, api, alice, charlie, carol):
    background, provider = deploy()
    card = the_card(background)

    for outsider in (charlie, carol):
        refused = api(outsider).post(f"/api/mcp/elicitations/{card.pk}/answer", {"action": "accept",
                                     "content": {"target": "x", "replicas": 1}}, format="json")
        assert (refused.status_code, refused.json()["code"]) == (403, "mcp_elicitation_forbidden")
    assert McpElicitation.objects.get(pk=card.pk).status == "pending"

    api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer", {"action": "cancel"}, format="json")
    background.exchange()
    assert "not deploying (cancel)" in provider.calls[1].messages[-1].content


def test_content_that_does_not_fit_the_schema_is_refused_and_the_card_stays_open(deploy, api, alice):
    background, provider = deploy()
    card = the_card(background)

    for content in ({"target": "eu-1", "replicas": 99}, {"replicas": 1}, None):
        body = {"action": "accept", **({"content": content} if content is not None else {})}
        refused = api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer", body, format="json")
        assert (refused.status_code, refused.json()["code"]) == (400, "mcp_elicitation_content_invalid"), content
    assert McpElicitation.objects.get(pk=card.pk).status == "pending"

    api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer",
                    {"action": "accept", "content": {"target": "us-2", "replicas": 10}}, format="json")
    background.exchange()
    assert "deploying to us-2 x10" in provider.calls[1].messages[-1].content


def test_an_unanswered_card_expires_and_the_server_is_told_decline(deploy, settings, api, alice):
    settings.SKALD_MCP_ELICITATION_TIMEOUT_SECONDS = 0  # expired at its first look: no clock needed
    background, provider = deploy()

    exchange = background.exchange()

    assert exchange.outcome == "completed"
    assert "not deploying (decline)" in provider.calls[1].messages[-1].content
    card = McpElicitation.objects.get()
    assert (card.status, card.answered_by) == ("expired", "system:skald")
    answered = AuditEvent.objects.get(kind=AuditKind.MCP_ELICITATION_ANSWERED, subject_id=str(card.pk))
    assert json.loads(answered.payload)["status"] == "expired"
    late = api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer", {"action": "decline"}, format="json")
    assert (late.status_code, late.json()["code"]) == (409, "mcp_elicitation_settled")


def test_an_unknown_card_is_404(api, alice, mcp_setup):
    response = api(alice).post("/api/mcp/elicitations/999999/answer", {"action": "decline"}, format="json")
    assert (response.status_code, response.json()["code"]) == (404, "mcp_elicitation_not_found")


def test_a_stop_while_a_card_waits_cancels_the_call_and_withdraws_the_card(deploy, alice):
    from loop.models import Session
    from skald.sessions.services import session_stop

    background, _provider = deploy()
    card = the_card(background)

    session_stop(user=alice, session=Session.objects.get(pk=card.session_id))

    exchange = background.exchange()
    assert exchange.outcome == "canceled"
    settled = threading.Event()
    for _ in range(3000):  # withdrawn by the pool's helper thread once the call ended
        if McpElicitation.objects.get(pk=card.pk).status != "pending":
            break
        settled.wait(0.02)
    card.refresh_from_db()
    assert (card.status, card.answered_by) == ("cancelled", "system:skald")


def test_the_calls_timeout_still_ends_a_call_and_pauses_while_a_person_answers(deploy, api, alice, script, ask):
    from approvals.models import ApprovalRule
    from skald.models import Agent

    Agent.objects.filter(name="operator").update(bounds={"tool_timeout": 0.5})
    ApprovalRule.objects.create(tool_pattern="mcp__demo__slow", action="allow", priority=10)
    script(tool_turn(("mcp__demo__slow", {})), text_turn("gave up"))

    timed_out = ask("slow")

    call = ToolCall.objects.get(exchange=timed_out)
    assert call.is_error and "mcp_timeout" in call.result and "did not answer within 0.5 s" in call.result

    background, provider = deploy()
    card = the_card(background)
    threading.Event().wait(1.0)  # longer than the call's 0.5 s: only the paused deadline lets it finish
    api(alice).post(f"/api/mcp/elicitations/{card.pk}/answer",
                    {"action": "accept", "content": {"target": "eu-1", "replicas": 1}}, format="json")
    background.exchange()
    assert "deploying to eu-1 x1" in provider.calls[1].messages[-1].content
