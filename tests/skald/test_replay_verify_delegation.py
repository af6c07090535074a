"""Replay-verify covers the frame tree and delivered results (SPEC U2, S1, S4): a delegating
session verifies clean, and edits to a child's result or a delivery are found."""

from __future__ import annotations

import pytest

from loop.events import EventKind
from loop.models import Frame, SessionEvent
from loop.providers.loopback import text_turn, tool_turn
from skald.crosscheck import replay_verify_session
from skald.jobs.models import JobRun

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def delegated(conversation, say, script, allow_all, inline_tasks):
    script(tool_turn(("execute_task", {"agent": "log-analyst", "task": "sync"}),
                     ("execute_task", {"agent": "log-analyst", "task": "async", "mode": "async"})),
           text_turn("sync answer"), text_turn("async answer"), text_turn("parent done"), text_turn("resumed"))
    say("delegate both ways")
    return conversation


def test_a_delegating_session_verifies_clean(delegated):
    report = replay_verify_session(session_id=delegated.pk)
    assert report.ok, report.mismatches
    assert Frame.objects.filter(session=delegated, depth=1).count() == 1
    assert JobRun.objects.get().delivered_at is not None


def test_a_child_result_pointing_elsewhere_is_found(delegated):
    row = SessionEvent.objects.get(session=delegated, kind=EventKind.SUBAGENT_RESULT)
    SessionEvent.objects.filter(pk=row.pk).update(payload={**row.payload, "frame": 999999})
    fields = {m["field"] for m in replay_verify_session(session_id=delegated.pk).mismatches}
    assert "subagent_result" in fields


def test_an_open_child_frame_in_a_settled_exchange_is_found(delegated):
    Frame.objects.filter(session=delegated, depth=1).update(status="open")
    mismatches = replay_verify_session(session_id=delegated.pk).mismatches
    assert any(m["field"] == "frame" and "open" in m["error"] for m in mismatches)


def test_a_delivery_moved_to_another_exchange_is_found(delegated):
    run = JobRun.objects.get()
    first = delegated.exchanges.order_by("number").first()
    JobRun.objects.filter(pk=run.pk).update(delivery_exchange=first)
    fields = {m["field"] for m in replay_verify_session(session_id=delegated.pk).mismatches}
    assert {"delivery_audit", "delivery"} <= fields
