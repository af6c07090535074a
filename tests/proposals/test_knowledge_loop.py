"""The loop closes through a human (SPEC Q2): what one run proposes is invisible to later runs
until a reviewer accepts it; then ``search_knowledge`` finds it."""

from __future__ import annotations

import pytest

from loop.providers.base import ToolResultMessage
from loop.providers.loopback import text_turn, tool_turn
from proposals.models import Proposal
from proposals.services import capture_proposals_on_resolve

# Not db_sensitive: a feature flow through the ORM paths that tests/loop (store, driver, recovery) and
# the race tests already run on PostgreSQL; it issues no SQL, lock or race of its own.
pytestmark = [pytest.mark.django_db(transaction=True)]

TITLE = "Connection pool exhaustion causes checkout 502s"
PROPOSE = ("propose_knowledge", {"title": TITLE, "body": "Raise the DB pool to 40; alert on pool wait > 200 ms."})
SEARCH = ("search_knowledge", {"query": "checkout pool exhaustion"})


def what_search_showed(launch, drive) -> str:
    """A later run on another case asks ``search_knowledge``; the result the model was shown."""
    run = launch(case_title="Checkout slow again", ticket="Checkout slow; 502s at peak")
    provider = drive(run, tool_turn(SEARCH), text_turn("noted"))
    seen = provider.calls[1].messages[-1]
    assert isinstance(seen, ToolResultMessage) and not seen.is_error
    return seen.content


def test_an_accepted_proposal_is_what_a_later_run_finds(launch, drive, bob, api):
    first = launch()
    drive(first, tool_turn(PROPOSE), text_turn("The pool is exhausted."))
    capture_proposals_on_resolve(run=first)
    proposal = Proposal.objects.get(run=first)

    assert what_search_showed(launch, drive) == "No accepted knowledge matches."  # pending is not knowledge

    accepted = api(bob).post(f"/api/proposals/{proposal.pk}/accept", {}, format="json")
    assert accepted.status_code == 200, accepted.content

    seen = what_search_showed(launch, drive)
    assert TITLE in seen and "[connection-pool-exhaustion-causes-checkout-502s v1]" in seen
    assert "Raise the DB pool to 40" in seen


def test_a_rejected_proposal_never_reaches_a_later_run(launch, drive, bob, api):
    first = launch()
    drive(first, tool_turn(PROPOSE), text_turn("The pool is exhausted."))
    capture_proposals_on_resolve(run=first)
    proposal = Proposal.objects.get(run=first)
    api(bob).post(f"/api/proposals/{proposal.pk}/reject", {"reason": "it was DNS"}, format="json")
    assert what_search_showed(launch, drive) == "No accepted knowledge matches."


def test_an_edit_at_acceptance_is_what_later_runs_read(launch, drive, bob, api):
    first = launch()
    drive(first, tool_turn(PROPOSE), text_turn("done"))
    capture_proposals_on_resolve(run=first)
    proposal = Proposal.objects.get(run=first)
    api(bob).post(f"/api/proposals/{proposal.pk}/accept",
                  {"title": "Checkout 502s: DB pool exhaustion", "body": "Pool of 40 is enough; 10 is not."},
                  format="json")
    seen = what_search_showed(launch, drive)
    assert "Checkout 502s: DB pool exhaustion" in seen and "Pool of 40 is enough" in seen
    assert "alert on pool wait" not in seen
