"""Capture and disposal under 20-way concurrency (issue 11 §3): one proposal per candidate, one
disposal per proposal, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from rest_framework_simplejwt.tokens import RefreshToken

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.providers.loopback import text_turn
from proposals.models import Proposal
from proposals.services import capture_proposals_on_resolve
from tests.race import race

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.db_sensitive]

N = 20


def test_20_captures_of_one_run_make_each_proposal_once(launch, drive):
    run = launch()
    drive(run, text_turn("The DB pool is exhausted: raise it to 40."))
    Proposal.objects.all().delete()  # as if the resolve-time capture had not run yet
    AuditEvent.objects.filter(kind=AuditKind.PROPOSAL_CAPTURED).delete()
    created = race(N, lambda i: capture_proposals_on_resolve(run=run))
    assert not [c for c in created if isinstance(c, BaseException)], created
    assert sum(len(c) for c in created) == 1
    assert Proposal.objects.filter(run=run).count() == 1
    assert AuditEvent.objects.filter(kind=AuditKind.PROPOSAL_CAPTURED).count() == 1


def test_20_reviewers_accepting_one_proposal_dispose_it_once(bob, pending):
    proposal = pending(title="Pool exhaustion", body="raise it")
    clients = []
    for _ in range(N):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {RefreshToken.for_user(bob).access_token}")
        clients.append(client)

    def accept(i: int) -> tuple[int, Any]:
        response = clients[i].post(f"/api/proposals/{proposal.pk}/accept", {}, format="json")
        return response.status_code, response.json()

    answers = race(N, accept)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert sorted(status for status, _ in answers) == [200] + [409] * (N - 1), answers
    assert accept(0)[0] == 409
