"""Capture on resolve (SPEC Q1): what a run proposed becomes pending proposals with their evidence,
never knowledge; capturing again changes nothing."""

from __future__ import annotations

import json

import pytest

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import SessionEvent, ToolCall
from loop.providers.loopback import text_turn, tool_turn
from proposals.models import KnowledgeEntry, Proposal, ProposalStatus
from proposals.services import capture_proposals_on_resolve

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]


def capture(run) -> list[Proposal]:
    """Resolve-time capture, then every proposal of the run.

    The workflow may already have captured when the run completed; capture is idempotent, so the
    proposals are the same either way.
    """
    capture_proposals_on_resolve(run=run)
    return list(Proposal.objects.filter(run=run).order_by("id"))

POOL_LOG = ("app.log", "12:00:01 ERROR pool: timeout waiting for connection (pool size 10)\n")
PROPOSE = ("propose_knowledge", {"title": "Connection pool exhaustion causes checkout 502s",
                                 "body": "When checkout returns 502, check the DB pool; raise it to 40.",
                                 "evidence": "app.log: timeout waiting for connection"})


def captured_audit_rows() -> list[dict]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=AuditKind.PROPOSAL_CAPTURED)]


def test_it_captures_a_proposed_candidate_as_a_pending_proposal_with_its_evidence(launch, drive):
    run = launch(logs=(POOL_LOG,))
    drive(run,
          tool_turn(("read_logs", {}), ("search_knowledge", {"query": "checkout 502"})),
          tool_turn(PROPOSE, text="The log shows pool timeouts; proposing."),
          text_turn("The DB pool is exhausted."))

    [proposal] = capture(run)

    assert proposal.status == ProposalStatus.PENDING
    assert (proposal.title, proposal.body) == (PROPOSE[1]["title"], PROPOSE[1]["body"])
    call = ToolCall.objects.get(tool="propose_knowledge")
    assert proposal.source_key == f"call:{call.pk}" and proposal.run == run
    evidence = proposal.evidence
    assert evidence["case"] == {"id": run.case_id, "title": "Checkout 502s"}
    assert evidence["ticket"] == run.ticket
    run.refresh_from_db()  # the run as capture saw it
    assert evidence["run"] == {"id": run.pk, "status": run.status, "outcome": run.outcome, "launched_by": "alice"}
    assert evidence["agent_evidence"] == "app.log: timeout waiting for connection"
    assert evidence["source"]["call_key"] == call.call_key
    # What the agent had seen (both results of the first round), then the call itself.
    assert [(e["kind"], e["tool"]) for e in evidence["events"]] == [
        ("tool_result", "read_logs"), ("tool_result", "search_knowledge"), ("assistant", "propose_knowledge")]
    assert "timeout waiting for connection" in evidence["events"][0]["excerpt"]
    assert evidence["events"][2]["excerpt"].startswith("The log shows pool timeouts; proposing.\n→ propose_knowledge(")
    cited = {e["seq"] for e in evidence["events"]}
    assert cited <= set(SessionEvent.objects.filter(session=run.session).values_list("seq", flat=True))
    # Proposals only, never publication.
    assert not KnowledgeEntry.objects.exists()
    assert captured_audit_rows() == [{"run": run.pk, "session": run.session_id, "source_key": proposal.source_key,
                                      "title": proposal.title, "cited_seqs": sorted(cited)}]


def test_capturing_again_changes_nothing(launch, drive):
    run = launch()
    drive(run, tool_turn(PROPOSE), text_turn("done"))
    [first] = capture(run)
    assert capture_proposals_on_resolve(run=run) == []
    assert capture_proposals_on_resolve(run=run) == []
    assert list(Proposal.objects.values_list("pk", flat=True)) == [first.pk]
    assert len(captured_audit_rows()) == 1


def test_a_later_resolve_captures_only_the_new_candidates(launch, drive):
    run = launch()
    drive(run, tool_turn(PROPOSE), text_turn("first"))
    [first] = capture(run)
    second = ("propose_knowledge", {"title": "Pool wait time is the early signal", "body": "Alert above 200 ms."})
    drive(run, tool_turn(second), text_turn("second"), message="what should we alert on?")
    again, new = capture(run)
    assert again == first
    assert new.title == "Pool wait time is the early signal" and new.evidence["exchange"] == 2
    assert len(captured_audit_rows()) == 2


def test_each_candidate_cites_only_what_preceded_it_in_its_exchange(launch, drive):
    run = launch(logs=(POOL_LOG,))
    other = ("propose_knowledge", {"title": "Search first", "body": "Always search knowledge first."})
    drive(run, tool_turn(other), tool_turn(("read_logs", {})), tool_turn(PROPOSE), text_turn("done"))
    first, second = capture(run)
    assert [e["kind"] for e in first.evidence["events"]] == ["assistant"]
    # The second saw the first call's own result and the logs.
    assert [e["tool"] for e in second.evidence["events"]] == ["propose_knowledge", "read_logs", "propose_knowledge"]


def test_a_run_that_proposed_nothing_proposes_its_final_answer(launch, drive):
    run = launch(logs=(POOL_LOG,), ticket="  \nCheckout returns 502 since the deploy\nthree customers")
    drive(run, tool_turn(("read_logs", {})), text_turn("The DB pool is exhausted: raise it to 40."))
    [proposal] = capture(run)
    assert proposal.title == f"{run.case.title}: The DB pool is exhausted: raise it to 40."
    assert proposal.body == "The DB pool is exhausted: raise it to 40."
    assert proposal.source_key.startswith("answer:")
    assert proposal.evidence["source"]["kind"] == "final_answer"
    assert [(e["kind"], e["excerpt"][:20]) for e in proposal.evidence["events"]] == [
        ("tool_result", "== app.log ==\n12:00:"), ("assistant", "The DB pool is exhau")]
    assert capture_proposals_on_resolve(run=run) == []


def test_the_answer_title_names_the_case_and_at_most_120_characters_of_the_finding(launch, drive):
    run = launch(ticket="the ticket")
    drive(run, text_turn("## " + "x" * 300 + "\nmore"))
    [proposal] = capture(run)
    assert proposal.title == f"{run.case.title}: " + "x" * 119 + "…"


def test_a_failed_propose_call_is_no_candidate_so_the_answer_is_captured(launch, drive):
    run = launch()
    invalid = ("propose_knowledge", {"title": "no body"})
    drive(run, tool_turn(invalid), text_turn("final words"))
    assert ToolCall.objects.get().status == "failed"
    [proposal] = capture(run)
    assert proposal.body == "final words" and proposal.source_key.startswith("answer:")


def test_a_run_with_neither_a_candidate_nor_an_answer_captures_nothing(launch):
    run = launch()
    assert capture_proposals_on_resolve(run=run) == []
    assert not Proposal.objects.exists() and not captured_audit_rows()


def test_excerpts_are_cut_at_500_characters(launch, drive):
    run = launch(logs=(("huge.log", "E" * 5000),))
    drive(run, tool_turn(("read_logs", {})), tool_turn(PROPOSE), text_turn("done"))
    [proposal] = capture(run)
    excerpt = proposal.evidence["events"][0]["excerpt"]
    assert len(excerpt) == 500 and excerpt.endswith("…")
    assert all(len(e["excerpt"]) <= 500 for e in proposal.evidence["events"])
