"""The review queue in the admin (SPEC O3, Q2): evidence beside the claim, disposal through an
intermediate page and the services, knowledge with its read-only history."""

from __future__ import annotations

import json

import pytest
from django.contrib.admin.sites import site
from django.test import RequestFactory

from audit.kinds import AuditKind
from audit.models import AuditEvent
from proposals.models import KnowledgeEntry, KnowledgeRevision, Proposal, ProposalStatus
from proposals.services import proposal_accept
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/proposals/proposal/"
KNOWLEDGE = "/admin/proposals/knowledgeentry/"


def act(client, action: str, *proposals: Proposal, **fields):
    data = {"action": action, "_selected_action": [p.pk for p in proposals], **fields}
    return client.post(CHANGELIST, data)


def test_the_queue_lists_pending_proposals_and_the_page_shows_the_evidence(client, bob, pending):
    proposal = pending()
    client.force_login(bob)
    queue = client.get(CHANGELIST, {"status__exact": "pending"})
    assert queue.status_code == 200 and [p.pk for p in queue.context["cl"].result_list] == [proposal.pk]
    page = client.get(f"{CHANGELIST}{proposal.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Checkout 502s" in html and "Checkout returns 502 since the deploy" in html  # case, ticket
    assert "timeout waiting for connection (pool size 10)" in html and "#5" in html  # a cited event
    assert "create the knowledge entry “connection-pool-exhaustion-causes-checkout-502s” (v1)" in html
    assert "Accept…" in html and "Reject…" in html and 'name="_save"' not in html
    # The audit trail is a link for audit readers only: bob (a reviewer) would meet a 403 there.
    assert "subject_type=proposal" not in html
    assert f'href="/admin/skald/run/{proposal.run_id}/change/"' in html  # the run, which reviewers may read


def test_an_auditor_follows_the_proposals_audit_trail(client, dave, pending):
    proposal = pending()
    client.force_login(dave)
    html = client.get(f"{CHANGELIST}{proposal.pk}/change/").content.decode()
    assert f"subject_type=proposal&amp;subject_id={proposal.pk}" in html


def test_the_evidence_is_escaped(client, bob, pending):
    proposal = pending()
    evidence = {**proposal.evidence, "ticket": "<script>alert(1)</script>"}
    Proposal.objects.filter(pk=proposal.pk).update(evidence=evidence)
    client.force_login(bob)
    html = client.get(f"{CHANGELIST}{proposal.pk}/change/").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_reject_asks_for_a_reason_and_refuses_without_one(client, bob, pending):
    proposal = pending()
    client.force_login(bob)
    form = act(client, "reject_selected", proposal)
    assert form.status_code == 200 and b'name="reason"' in form.content
    assert b"timeout waiting for connection" in form.content  # the evidence is on the decision page
    refused = act(client, "reject_selected", proposal, apply="1", reason="   ")
    assert refused.status_code == 200 and refused.context["form"].errors["reason"]
    assert Proposal.objects.get().status == ProposalStatus.PENDING
    assert not AuditEvent.objects.filter(kind=AuditKind.PROPOSAL_REJECTED).exists()

    done = act(client, "reject_selected", proposal, apply="1", reason="It was DNS.")
    assert done.status_code == 302
    proposal.refresh_from_db()
    assert (proposal.status, proposal.reason, proposal.disposed_by) == ("rejected", "It was DNS.", bob)
    assert json.loads(AuditEvent.objects.get(kind=AuditKind.PROPOSAL_REJECTED).payload)["reason"] == "It was DNS."


def test_accept_through_the_action_goes_through_the_service_and_audits(client, bob, pending):
    proposal = pending(body="Raise the pool to 40.\nAlert on pool wait time.")
    client.force_login(bob)
    form = act(client, "accept_selected", proposal)
    assert form.status_code == 200
    assert form.context["form"].initial == {"title": proposal.title, "body": proposal.body}
    done = act(client, "accept_selected", proposal, apply="1", title="DB pool exhaustion",
               body=proposal.body.replace("\n", "\r\n"))
    assert done.status_code == 302
    entry = KnowledgeEntry.objects.get()
    assert (entry.slug, entry.title, entry.body) == ("db-pool-exhaustion", "DB pool exhaustion", proposal.body)
    accepted = json.loads(AuditEvent.objects.get(kind=AuditKind.PROPOSAL_ACCEPTED).payload)
    assert accepted["edited"] == ["title"] and accepted["slug"] == "db-pool-exhaustion"
    assert AuditEvent.objects.filter(kind=AuditKind.KNOWLEDGE_VERSIONED).count() == 1

    again = act(client, "accept_selected", proposal, apply="1", title="x", body="y")
    assert again.status_code == 302 and KnowledgeEntry.objects.get().version == 1
    assert any("already disposed" in str(m) for m in again.wsgi_request._messages)


def test_several_proposals_are_accepted_at_once_without_edits(client, bob, pending):
    first, second = pending(title="Pool sizing"), pending(title="Pool alerts")
    client.force_login(bob)
    form = act(client, "accept_selected", first, second)
    assert form.status_code == 200 and form.context["form"] is None
    assert act(client, "accept_selected", first, second, apply="1").status_code == 302
    assert sorted(KnowledgeEntry.objects.values_list("slug", flat=True)) == ["pool-alerts", "pool-sizing"]
    assert AuditEvent.objects.filter(kind=AuditKind.PROPOSAL_ACCEPTED).count() == 2


def test_deciding_one_proposal_lands_on_the_next_waiting_then_on_the_list(client, bob, pending):
    first, second = pending(title="Pool sizing"), pending(title="Pool alerts")
    client.force_login(bob)
    moved = act(client, "accept_selected", first, apply="1", title=first.title, body=first.body)
    assert moved.status_code == 302 and moved["Location"] == f"{CHANGELIST}{second.pk}/change/"
    [said] = [str(m) for m in moved.wsgi_request._messages]
    assert said == ("Accepted “Pool sizing”: accepted as “pool-sizing” v1. "
                    "Now showing the next proposal waiting: “Pool alerts”.")
    done = act(client, "reject_selected", second, apply="1", reason="Alerts exist already.")
    assert done["Location"] == CHANGELIST
    said = [str(m) for m in done.wsgi_request._messages][-1]  # the first is still unread (no page shown)
    assert said == "Rejected “Pool alerts”. Nothing else is waiting: the list below shows every proposal."


def test_the_page_buttons_open_the_intermediate_page(client, bob, pending):
    proposal = pending()
    client.force_login(bob)
    html = client.get(f"{CHANGELIST}{proposal.pk}/change/").content.decode()
    for action in ("accept_selected", "reject_selected"):
        assert f'<form method="post" action="{CHANGELIST}">' in html
        assert f'name="action" value="{action}"' in html
        # What the button posts: the action and this proposal, no "apply" yet.
        response = client.post(CHANGELIST, {"action": action, "_selected_action": proposal.pk})
        assert response.status_code == 200
        assert "admin/proposals/proposal/dispose.html" in [t.name for t in response.templates]
    assert Proposal.objects.get().status == ProposalStatus.PENDING


def test_an_auditor_reads_the_queue_but_is_offered_no_disposal(client, dave, pending):
    proposal = pending()
    client.force_login(dave)
    assert client.get(CHANGELIST).status_code == 200
    page = client.get(f"{CHANGELIST}{proposal.pk}/change/").content.decode()
    assert "Accept…" not in page
    act(client, "accept_selected", proposal, apply="1", title="x", body="y")
    assert Proposal.objects.get().status == ProposalStatus.PENDING


def test_nobody_adds_changes_or_deletes_proposals_or_knowledge_in_the_admin(client, pending, bob):
    root = make_user("root", superuser=True)
    request = RequestFactory().get(CHANGELIST)
    request.user = root
    for model in (Proposal, KnowledgeEntry):
        model_admin = site._registry[model]
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request)
        assert not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)
    proposal = pending()
    client.force_login(root)
    assert client.post(f"{CHANGELIST}{proposal.pk}/change/", {"title": "edited"}).status_code == 403
    assert client.get(CHANGELIST + "add/").status_code == 403
    assert Proposal.objects.get().title == proposal.title


def test_a_knowledge_entry_shows_its_history_read_only(client, bob, pending):
    proposal_accept(reviewer=bob, proposal_id=pending(body="Pool of 20.").pk)
    proposal_accept(reviewer=bob, proposal_id=pending(body="Pool of 40.").pk)
    entry = KnowledgeEntry.objects.get()
    client.force_login(bob)
    assert client.get(KNOWLEDGE).status_code == 200
    page = client.get(f"{KNOWLEDGE}{entry.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Pool of 20." in html and "Pool of 40." in html and 'name="_save"' not in html
    assert 'name="revisions-0-body"' not in html  # revisions render as text, not inputs
    assert client.post(f"{KNOWLEDGE}{entry.pk}/change/", {"body": "x"}).status_code == 403
    assert KnowledgeRevision.objects.count() == 2
