"""Replay-verify recomputes the windows, manifests and probe reports of compactions from stored rows."""

from __future__ import annotations

import pytest

from loop.compaction.prompt import is_summary_request
from loop.driver import run_turns_keyed
from loop.models import SessionEvent
from loop.tripwires import OrgPattern, organisation_detector
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


def test_probes_are_recomputed_under_the_rule_set_the_driver_screened_with(make_env, session):
    # An organisation pattern matching exchange 3's request id (in its tool call's arguments).
    guard = organisation_detector([OrgPattern("request-id", r"req_300a9f3", ("req_",))])
    provider = scripted_model()
    env = make_env(provider, compaction=SMALL, detector=guard)
    for number in range(1, 9):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    probes = list(SessionEvent.objects.filter(session=session, kind="control:compaction_probe").order_by("seq"))
    assert probes and {probe.payload["guard"] for probe in probes} == {guard.fingerprint}
    summaries = [r.messages[0].content for r in provider.calls if is_summary_request(r)]
    assert summaries and not any("req_300a9f3" in transcript for transcript in summaries)  # screened first

    assert verify_rows(load_session_rows(session.pk), guard=guard) == []
    # Under another rule set the reports cannot be recomputed: not re-scored, never a false alarm.
    assert verify_rows(load_session_rows(session.pk)) == []
    tampered = probes[0]
    tampered.payload = {**tampered.payload, "post_hits": tampered.payload["post_hits"] + 1}
    tampered.save(update_fields=["payload"])
    fields = {f["field"] for f in verify_rows(load_session_rows(session.pk), guard=guard)}
    assert "compaction.probe.post_hits" in fields


def test_a_report_of_the_first_draw_is_re_drawn_by_it(make_env, session, monkeypatch):
    # Reports written before probes named their draw were drawn by draw 1 (empty probes and all).
    from functools import partial

    import loop.compaction.cycle as cycle
    from loop.compaction.probes import draw_probes, score

    monkeypatch.setattr(cycle, "draw_probes", partial(draw_probes, draw=1))
    monkeypatch.setattr(cycle, "score", partial(score, draw=1))
    env = make_env(scripted_model(), compaction=SMALL)
    for number in range(1, 9):
        run_turns_keyed(env, request_key=f"k{number}", content=f"check {number}")
    reports = list(SessionEvent.objects.filter(session=session, kind="control:compaction_probe"))
    assert len(reports) >= 2
    for probe in reports:
        assert probe.payload.pop("draw") == 1
        probe.save(update_fields=["payload"])
    # (The edited rows break the exchanges' receipts, not what the compaction check recomputes.)
    assert [f for f in verify_rows(load_session_rows(session.pk)) if f["field"].startswith("compaction")] == []
    first = reports[0]
    first.payload = {**first.payload, "probes": [{**p, "text": ""} for p in first.payload["probes"]]}
    first.save(update_fields=["payload"])
    assert "compaction.probe.probes" in {f["field"] for f in verify_rows(load_session_rows(session.pk))}
