"""Console sessions attach to a case (so ``read_logs`` has logs), and approvers see the sessions
that parked a call for them."""

from __future__ import annotations

import pytest

from audit.actors import Actor
from loop.models import Session, SessionEvent
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.loop_adapters.runtime import session_extras

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def agents(db: None) -> None:
    seed_agents()


def test_an_operator_creates_a_session_attached_to_a_case(api, alice):
    case = case_create(actor=Actor.system("test"), title="502s", description="", logs=())
    created = api(alice).post("/api/sessions/", {"case": case.pk}, format="json")
    assert created.status_code == 201, created.content
    session_id = created.json()["id"]
    note = SessionEvent.objects.get(session_id=session_id, kind="control:note")
    assert note.payload == {"attached_case": case.pk}
    assert session_extras(Session.objects.get(pk=session_id)) == {"case_id": case.pk}


def test_only_operators_attach_and_only_to_a_case_that_exists(api, alice, bob):
    assert api(alice).post("/api/sessions/", {"case": 999}, format="json").json()["code"] == "case_unknown"
    refused = api(bob).post("/api/sessions/", {"case": 1}, format="json")
    assert refused.status_code == 403 and refused.json()["code"] == "case_forbidden"
