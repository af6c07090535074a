"""Skald's admin: its name, `/` and the favicon, and a home whose panels follow the viewer's roles."""

from __future__ import annotations

import pytest

from tests.conftest import make_user

pytestmark = pytest.mark.django_db


def test_the_root_and_the_favicon_lead_somewhere(client):
    assert client.get("/")["Location"] == "/admin/"
    assert client.get("/favicon.ico")["Location"].endswith("skald/favicon.svg")


@pytest.mark.parametrize(("roles", "panels"), [
    (("operator", "workflow"), {"cases", "runs"}),
    (("approver",), {"approvals"}),
    (("reviewer",), {"proposals"}),
    (("auditor",), {"audit"}),
    ((), set()),
])
def test_each_role_gets_its_own_panels(client, roles, panels):
    erin = make_user("erin", *roles)
    erin.is_staff = True  # a staff member the roles have not reached yet
    erin.save()
    client.force_login(erin)
    page = client.get("/admin/")
    html = page.content.decode()
    assert page.status_code == 200 and "<title>Home | Skald</title>" in html
    assert {panel.key for panel in page.context["panels"]} == panels
    fragment = client.get("/admin/home/panels/")
    assert fragment.status_code == 200 and {p.key for p in fragment.context["panels"]} == panels
    if not panels:
        assert "You hold no Skald role yet" in html


def test_a_superuser_without_the_workflow_role_is_offered_no_launch(client):
    client.force_login(make_user("root", superuser=True))
    html = client.get("/admin/").content.decode()
    assert 'id="panel-cases"' in html and "/launch/" not in html


def test_the_auditors_panel_says_how_far_the_chain_is_intact_and_when_it_was_read_in_full(client):
    from audit.services import chain_verified_tip_forget

    chain_verified_tip_forget()
    client.force_login(make_user("dave", "auditor"))
    lead = client.get("/admin/home/panels/").content.decode()
    assert "Chain intact up to seq" in lead and "the whole chain was last verified" in lead
