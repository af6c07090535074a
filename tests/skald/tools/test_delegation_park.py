"""A call that needs approval inside a child frame parks the whole tree through Skald's real gate
and approval API (SPEC S1, A3, R3): the card is answerable like any other; approving resumes the
child, then its parent; a stop while the tree waits closes every frame."""

from __future__ import annotations

import pytest

from approvals.models import ApprovalStatus, PendingApproval
from approvals.rules.seed import default_rules_ensure
from loop.events import EventKind
from loop.models import Frame, SessionEvent, ToolCall
from loop.providers.loopback import text_turn, tool_turn
from loop.verify import load_session_rows, verify_rows
from skald.sessions.services import session_stop

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

ANALYSE = ("execute_task", {"agent": "log-analyst", "task": "find the 502s in the logs"})
DEEPER = ("execute_task", {"agent": "log-analyst", "task": "look at the pool metrics"})


def approve(api, user, approval: PendingApproval) -> None:
    response = api(user).post(f"/api/tools/{approval.tool_call_id}/resolve", {"decision": "approve"}, format="json")
    assert response.status_code == 202, response.content


def park_in_the_child(conversation, say, api, carol):
    default_rules_ensure()
    exchange = say("why 502?")
    approve(api, carol, PendingApproval.objects.get(status=ApprovalStatus.PENDING))  # the root's delegation
    exchange.refresh_from_db()
    return exchange


def test_a_childs_call_that_needs_approval_parks_the_tree_and_resumes_it(conversation, say, script, api, carol,
                                                                          inline_tasks):
    script(tool_turn(ANALYSE), tool_turn(DEEPER), text_turn("pool at 100%"), text_turn("pool exhausted"),
           text_turn("diagnosed: pool exhausted"))
    exchange = park_in_the_child(conversation, say, api, carol)

    assert exchange.status == "parked"  # the child asked for a grandchild: a human must say yes first
    child = Frame.objects.get(session=conversation, depth=1)
    card = PendingApproval.objects.get(status=ApprovalStatus.PENDING)
    assert ToolCall.objects.get(pk=card.tool_call_id).frame_id == child.pk
    assert "Task: look at the pool metrics" in card.preview
    assert child.status == "open" and child.parent_call.status == "running"

    approve(api, carol, card)

    exchange.refresh_from_db()
    assert exchange.outcome == "completed"
    assert [(f.depth, f.status, f.outcome) for f in Frame.objects.filter(session=conversation).order_by("depth")] \
        == [(0, "closed", "completed"), (1, "closed", "completed"), (2, "closed", "completed")]
    summaries = SessionEvent.objects.filter(session=conversation, kind=EventKind.SUBAGENT_RESULT).order_by("seq")
    assert [s.payload["content"] for s in summaries] == ["pool at 100%", "pool exhausted"]
    assert ToolCall.objects.get(frame__depth=0).result == "pool exhausted"
    assert verify_rows(load_session_rows(conversation.pk)) == []


def test_a_stop_while_a_child_waits_for_approval_closes_the_tree(conversation, say, script, api, carol, alice,
                                                                  inline_tasks):
    script(tool_turn(ANALYSE), tool_turn(DEEPER), text_turn("never"))
    park_in_the_child(conversation, say, api, carol)

    stopped = session_stop(user=alice, session=conversation)

    assert stopped.outcome == "canceled"
    assert Frame.objects.get(session=conversation, depth=1).status == "closed"
    assert set(ToolCall.objects.filter(session=conversation).values_list("status", flat=True)) == {"canceled"}
    assert not PendingApproval.objects.filter(status=ApprovalStatus.PENDING).exists()
    assert verify_rows(load_session_rows(conversation.pk)) == []
