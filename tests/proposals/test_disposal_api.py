"""The review queue over REST (SPEC Q2): reviewers read the evidence and dispose once; accepting
writes versioned knowledge; rejecting needs a reason; four eyes keeps launchers off their own runs."""

from __future__ import annotations

import json
import threading

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connection

from audit.kinds import AuditKind
from audit.models import AuditEvent
from proposals.models import KnowledgeEntry, KnowledgeRevision, Proposal, ProposalStatus
from proposals.services import proposal_accept, proposal_reject
from skald.core.errors import Forbidden, SkaldError

pytestmark = pytest.mark.django_db

LIST = "/api/proposals/"


def url(proposal: Proposal, verb: str = "") -> str:
    return f"{LIST}{proposal.pk}/{verb}"


def audit_payloads(kind: AuditKind) -> list[dict]:
    return [json.loads(row.payload) for row in AuditEvent.objects.filter(kind=kind).order_by("seq")]


def test_a_reviewer_lists_the_pending_queue_oldest_first(bob, api, pending, django_assert_max_num_queries):
    older, newer = pending(title="First"), pending(title="Second")
    for _ in range(3):
        pending()
    proposal_reject(reviewer=bob, proposal_id=newer.pk, reason="duplicate")
    client = api(bob)  # issuing the token records it (the refresh blacklist): not the request's cost
    with django_assert_max_num_queries(5):  # user, token version, roles, count, page: no query per row
        body = client.get(LIST, {"status": "pending"}).json()
    assert body["count"] == 4
    rows = body["results"]
    assert rows[0]["id"] == older.pk and [r["status"] for r in rows] == ["pending"] * 4
    assert rows[0]["case"] == {"id": older.run.case_id, "title": "Checkout 502s"}
    assert {"evidence", "body"}.isdisjoint(rows[0])  # the queue triages; the detail carries the claim
    rejected = api(bob).get(LIST, {"status": "rejected"}).json()["results"]
    assert [(r["id"], r["reason"], r["disposed_by"]) for r in rejected] == [(newer.pk, "duplicate", "bob")]


def test_an_unknown_status_filter_is_invalid(bob, api):
    response = api(bob).get(LIST, {"status": "published"})
    assert response.status_code == 400 and response.json()["code"] == "invalid"


def test_the_detail_carries_the_evidence_and_what_accepting_would_do(bob, api, pending):
    proposal = pending()
    body = api(bob).get(url(proposal)).json()
    assert body["title"] == proposal.title and body["body"] == proposal.body
    evidence = body["evidence"]
    assert evidence["case"]["title"] == "Checkout 502s" and evidence["ticket"] == proposal.run.ticket
    assert evidence["run"]["id"] == proposal.run_id
    assert [e["seq"] for e in evidence["events"]] == [5, 9]
    assert body["consequence"] == {"action": "create", "slug": "connection-pool-exhaustion-causes-checkout-502s",
                                   "entry": None, "version": 1}


def test_only_reviewers_dispose_auditors_only_read_and_others_are_refused(alice, bob, charlie, dave, api, pending):
    proposal = pending()
    assert api(dave).get(LIST).status_code == 200 and api(dave).get(url(proposal)).status_code == 200
    for user in (alice, charlie):
        assert api(user).get(LIST).status_code == 403
    assert api(None).get(LIST).status_code == 401
    for user in (alice, charlie, dave):
        assert api(user).post(url(proposal, "accept"), {}, format="json").status_code == 403
        assert api(user).post(url(proposal, "reject"), {"reason": "no"}, format="json").status_code == 403
    with pytest.raises(Forbidden):
        proposal_accept(reviewer=dave, proposal_id=proposal.pk)
    assert Proposal.objects.get().status == ProposalStatus.PENDING and not KnowledgeEntry.objects.exists()


def test_an_unknown_proposal_is_a_404_with_a_code(bob, api):
    for response in (api(bob).get(f"{LIST}999/"), api(bob).post(f"{LIST}999/accept", {}, format="json")):
        assert response.status_code == 404 and response.json()["code"] == "proposal_not_found"


@pytest.mark.db_sensitive
def test_accepting_writes_a_versioned_entry_and_audits_both(bob, api, pending):
    proposal = pending()
    response = api(bob).post(url(proposal, "accept"), {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "accepted" and body["disposed_by"] == "bob"
    entry = KnowledgeEntry.objects.get()
    assert (entry.slug, entry.title, entry.body, entry.version) == (
        "connection-pool-exhaustion-causes-checkout-502s", proposal.title, proposal.body, 1)
    assert body["knowledge_entry"] == entry.slug
    assert body["consequence"] == {"action": "applied", "slug": entry.slug, "entry": entry.pk, "version": 1}
    revision = KnowledgeRevision.objects.get()
    assert (revision.version, revision.proposal_id, revision.created_by_id) == (1, proposal.pk, bob.pk)
    [accepted] = audit_payloads(AuditKind.PROPOSAL_ACCEPTED)
    assert accepted == {"run": proposal.run_id, "entry": entry.pk, "slug": entry.slug, "version": 1, "edited": []}
    [versioned] = audit_payloads(AuditKind.KNOWLEDGE_VERSIONED)
    assert versioned["version"] == 1 and versioned["created"] is True and versioned["proposal"] == proposal.pk
    call_command("verify_chain")


def test_a_reviewer_may_edit_what_becomes_knowledge_and_the_proposal_keeps_what_was_proposed(bob, api, pending):
    proposal = pending()
    response = api(bob).post(url(proposal, "accept"), {"title": "DB pool exhaustion → 502 at checkout",
                                                        "body": "Raise the pool to 40."}, format="json")
    assert response.status_code == 200
    entry = KnowledgeEntry.objects.get()
    assert (entry.slug, entry.title, entry.body) == (
        "db-pool-exhaustion-502-at-checkout", "DB pool exhaustion → 502 at checkout", "Raise the pool to 40.")
    proposal.refresh_from_db()
    assert proposal.title == "Connection pool exhaustion causes checkout 502s"
    assert audit_payloads(AuditKind.PROPOSAL_ACCEPTED)[0]["edited"] == ["body", "title"]
    blank = api(bob).post(url(pending(), "accept"), {"title": "   "}, format="json")
    assert blank.status_code == 400 and blank.json()["code"] == "invalid"


def test_accepting_a_title_that_names_an_entry_bumps_its_version_and_keeps_its_history(bob, api, pending):
    first = pending(body="Raise the pool to 20.")
    second = pending(body="Raise the pool to 40 and alert on wait time.")
    assert api(bob).get(url(second)).json()["consequence"]["action"] == "create"
    api(bob).post(url(first, "accept"), {}, format="json")
    assert api(bob).get(url(second)).json()["consequence"] == {
        "action": "update", "slug": "connection-pool-exhaustion-causes-checkout-502s",
        "entry": KnowledgeEntry.objects.get().pk, "version": 2}
    api(bob).post(url(second, "accept"), {}, format="json")
    entry = KnowledgeEntry.objects.get()
    assert (entry.version, entry.body) == (2, "Raise the pool to 40 and alert on wait time.")
    assert list(entry.revisions.values_list("version", "body", "proposal")) == [
        (2, "Raise the pool to 40 and alert on wait time.", second.pk), (1, "Raise the pool to 20.", first.pk)]
    assert [p["created"] for p in audit_payloads(AuditKind.KNOWLEDGE_VERSIONED)] == [True, False]


def test_a_proposal_linked_to_an_entry_updates_that_entry_whatever_its_title(bob, pending):
    proposal_accept(reviewer=bob, proposal_id=pending(title="Pool sizing").pk)
    entry = KnowledgeEntry.objects.get()
    linked = pending(title="A fresh look at pool sizing")
    Proposal.objects.filter(pk=linked.pk).update(knowledge_entry=entry)
    proposal_accept(reviewer=bob, proposal_id=linked.pk)
    entry.refresh_from_db()
    assert (entry.slug, entry.title, entry.version) == ("pool-sizing", "A fresh look at pool sizing", 2)


@pytest.mark.db_sensitive
def test_rejecting_needs_a_reason_and_is_audited(bob, api, pending):
    proposal = pending()
    for body in ({}, {"reason": ""}, {"reason": "   "}):
        response = api(bob).post(url(proposal, "reject"), body, format="json")
        assert response.status_code == 400 and response.json()["code"] == "invalid"
        assert "reason" in response.json()["extra"]["fields"]
    with pytest.raises(SkaldError) as refused:
        proposal_reject(reviewer=bob, proposal_id=proposal.pk, reason=" \n ")
    assert refused.value.code == "invalid" and refused.value.http_status == 400
    response = api(bob).post(url(proposal, "reject"), {"reason": "  The pool was fine; it was DNS.  "},
                             format="json")
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["reason"]) == ("rejected", "The pool was fine; it was DNS.")
    assert audit_payloads(AuditKind.PROPOSAL_REJECTED) == [{"run": proposal.run_id,
                                                             "reason": "The pool was fine; it was DNS."}]
    assert not KnowledgeEntry.objects.exists()


@pytest.mark.db_sensitive
def test_disposing_twice_is_a_conflict(bob, api, pending):
    accepted, rejected = pending(), pending(title="Other")
    api(bob).post(url(accepted, "accept"), {}, format="json")
    api(bob).post(url(rejected, "reject"), {"reason": "no"}, format="json")
    for proposal in (accepted, rejected):
        for verb, body in (("accept", {}), ("reject", {"reason": "again"})):
            response = api(bob).post(url(proposal, verb), body, format="json")
            assert response.status_code == 409 and response.json()["code"] == "proposal_already_disposed"
    assert KnowledgeEntry.objects.get().version == 1
    assert Proposal.objects.get(pk=rejected.pk).reason == "no"


def test_with_four_eyes_the_launcher_cannot_dispose_their_runs_proposals(alice, bob, api, pending, settings):
    alice.groups.add(Group.objects.get(name="reviewer"))
    proposal = pending()  # launched by alice
    settings.SKALD_FOUR_EYES = False
    other = pending()
    assert api(alice).post(url(other, "accept"), {}, format="json").status_code == 200
    settings.SKALD_FOUR_EYES = True
    for verb, body in (("accept", {}), ("reject", {"reason": "mine"})):
        response = api(alice).post(url(proposal, verb), body, format="json")
        assert response.status_code == 403 and response.json()["code"] == "four_eyes_required"
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    assert api(bob).post(url(proposal, "accept"), {}, format="json").status_code == 200


@pytest.mark.db_sensitive
@pytest.mark.django_db(transaction=True)
def test_two_reviewers_racing_on_one_proposal_dispose_it_once(bob, pending):
    from tests.conftest import make_user

    erin = make_user("erin", "reviewer")
    proposal = pending()
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def dispose(reviewer, act) -> None:
        barrier.wait()
        try:
            act(reviewer)
            outcomes.append("ok")
        except SkaldError as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=dispose, args=(bob, lambda r: proposal_accept(reviewer=r, proposal_id=proposal.pk))),
        threading.Thread(target=dispose, args=(erin, lambda r: proposal_reject(reviewer=r, proposal_id=proposal.pk,
                                                                                reason="race"))),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["ok", "proposal_already_disposed"]
    disposed = audit_payloads(AuditKind.PROPOSAL_ACCEPTED) + audit_payloads(AuditKind.PROPOSAL_REJECTED)
    assert len(disposed) == 1
    assert KnowledgeEntry.objects.count() == (1 if Proposal.objects.get().status == "accepted" else 0)


def test_the_schema_names_the_disposal_error_codes(client):
    schema = client.get("/api/schema/").content.decode()
    start, end = (schema.index(f"/api/proposals/{{proposal_id}}/{verb}:") for verb in ("accept", "reject"))
    accept = schema[start:end]
    for code in ("invalid", "four_eyes_required", "proposal_not_found", "proposal_already_disposed"):
        assert f"code: {code}" in accept
