"""Replay-verify recomputes the windows, manifests and probe reports of compactions from stored rows."""

from __future__ import annotations

import pytest

from loop.compaction.prompt import is_summary_request
from loop.driver import run_turns_keyed
from loop.models import SessionEvent
from loop.verify import load_session_rows, verify_rows
from tests.loop.compaction.conftest import SMALL, scripted_model

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


@pytest.fixture
def compacted(make_env, session):
    provider = scripted_model()
    env = make_env(provider, compaction=SMALL)
    for number in range(1, 9):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    assert SessionEvent.objects.filter(session=session, kind="compaction").count() >= 2
    return session, provider


def test_a_compacted_session_verifies_without_calling_a_model(compacted):
    session, provider = compacted
    calls = len(provider.calls)
    assert verify_rows(load_session_rows(session.pk)) == []
    assert len(provider.calls) == calls and sum(is_summary_request(r) for r in provider.calls) >= 2


def test_an_edited_covered_row_breaks_the_manifest_digest(compacted):
    session, _ = compacted
    row = SessionEvent.objects.get(session=session, kind="compaction", seq=SessionEvent.objects.filter(
        session=session, kind="compaction").order_by("seq").values_list("seq", flat=True).first())
    covered = SessionEvent.objects.filter(session=session, kind="tool_result",
                                          seq__lte=row.payload["manifest"]["last_seq"]).first()
    covered.payload = {**covered.payload, "content": "echo: nothing to see"}
    covered.save(update_fields=["payload"])
    fields = {f["field"] for f in verify_rows(load_session_rows(session.pk))}
    assert "compaction.digest" in fields


def test_an_edited_probe_score_is_caught(compacted):
    session, _ = compacted
    probe = SessionEvent.objects.filter(session=session, kind="control:compaction_probe").first()
    probe.payload = {**probe.payload, "lost_permille": 0, "result": "ok"} if probe.payload["lost_permille"] else {
        **probe.payload, "lost_permille": 900}
    probe.save(update_fields=["payload"])
    fields = {f["field"] for f in verify_rows(load_session_rows(session.pk))}
    assert "compaction.probe.lost_permille" in fields
