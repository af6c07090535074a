"""The console page as each role gets it (issue 35): who may not start a session or send sees no New
session or Send and one sentence saying why; a session without a case warns above the message box;
the session list says which sessions wait for an approver."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from approvals.models import ApprovalStatus, PendingApproval
from approvals.pending.services import pending_approval_resolve
from approvals.rules.seed import default_rules_ensure
from audit.actors import Actor
from loop.providers.loopback import tool_turn
from skald.agents.seed import seed_agents
from skald.cases.services import case_create
from skald.sessions import services

pytestmark = pytest.mark.django_db

READ_ONLY = ("You can read sessions; starting one or sending a message needs the operator, approver, reviewer "
             "or workflow role.")


@pytest.fixture(autouse=True)
def agents(db: None) -> None:
    seed_agents()


def page(client: Client, user: Any) -> str:
    client.force_login(user)
    response = client.get("/console/")
    assert response.status_code == 200
    return response.content.decode()


def test_the_console_asks_anonymous_visitors_to_log_in(client):
    response = client.get("/console/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_console_serves_its_page_with_a_csrf_cookie(alice, client):
    client.force_login(alice)
    response = client.get("/console/")
    assert response.status_code == 200 and b"skald/console.js" in response.content
    assert "csrftoken" in response.cookies
    assert client.get("/static/skald/console.js").status_code == 200


@pytest.mark.parametrize("who", ["alice", "bob", "carol"])  # operator, reviewer, approver: they converse
def test_roles_that_converse_get_new_session_and_send(request, client, who):
    html = page(client, request.getfixturevalue(who))
    assert 'id="new-session"' in html and 'id="message"' in html and ">Send</button>" in html
    assert 'data-can-converse="1"' in html and 'id="read-only"' not in html


def test_an_auditor_reads_without_new_session_or_send_and_is_told_why(client, dave):
    html = page(client, dave)
    assert 'id="new-session"' not in html and 'id="message"' not in html and ">Send</button>" not in html
    assert 'id="stop"' not in html  # an auditor stops nothing either
    assert 'data-can-converse="0"' in html and READ_ONLY in html
    assert "Pick a session to read." in html


def test_a_user_without_a_role_is_told_no_role_uses_sessions(client, charlie):
    html = page(client, charlie)
    assert 'id="new-session"' not in html and 'id="message"' not in html
    assert "Your account holds no role that uses sessions" in html


def test_only_an_operator_may_stop_any_session(client, alice, carol):
    assert 'data-can-stop-any="1"' in page(client, alice)
    assert 'data-can-stop-any="0"' in page(client, carol)


def test_the_operator_picks_a_case_and_a_session_without_one_warns_how_to_get_one(client, alice):
    case_create(actor=Actor.system("test"), title="502s after deploy", description="", logs=())
    html = page(client, alice)
    assert '<select id="new-case">' in html and "502s after deploy" in html
    assert 'id="no-case"' in html and "tools that read a case's logs" in html and "Launch a run" in html
    assert "choose it above and press New session" in html


def test_others_are_told_an_operator_launches_a_run_on_a_case(client, carol):
    html = page(client, carol)
    assert 'id="new-case"' not in html
    assert "an operator launches" in html and "Launch a run" in html


def test_the_session_api_says_which_case_a_session_reads(api, alice, carol):
    case = case_create(actor=Actor.system("test"), title="502s", description="", logs=())
    attached = api(alice).post("/api/sessions/", {"case": case.pk}, format="json").json()
    bare = api(carol).post("/api/sessions/", {}, format="json").json()
    assert (attached["case"], bare["case"]) == (case.pk, None)
    listed = {row["id"]: row["case"] for row in api(alice).get("/api/sessions/").json()}
    assert listed[attached["id"]] == case.pk and listed[bare["id"]] is None
    assert api(alice).get(f"/api/sessions/{attached['id']}/").json()["case"] == case.pk


def test_the_session_list_marks_a_session_waiting_for_an_approver(api, alice, script, settings, tmp_path,
                                                                   django_capture_on_commit_callbacks):
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    default_rules_ensure()  # an operator's write_file waits for an approver
    asking = services.session_create(user=alice, title="asks")
    quiet = services.session_create(user=alice, title="quiet")
    script(tool_turn(("write_file", {"path": "r.md", "content": "x"})))
    with django_capture_on_commit_callbacks(execute=True):  # the worker's turn, inline
        services.session_message_submit(user=alice, session=asking, content="write it")
    assert PendingApproval.objects.filter(session=asking, status=ApprovalStatus.PENDING).exists()

    waiting = {row["id"]: row["awaiting_approval"] for row in api(alice).get("/api/sessions/").json()}
    assert waiting[asking.pk] is True and waiting[quiet.pk] is False

    PendingApproval.objects.filter(session=asking).update(status=ApprovalStatus.APPROVED)  # answered: no badge
    assert api(alice).get(f"/api/sessions/{asking.pk}/").json()["awaiting_approval"] is False


def test_an_answered_approval_reaches_the_console_with_the_approvers_name(
        api, alice, carol, script, settings, tmp_path, django_capture_on_commit_callbacks):
    """The console's card and log row read ``by_name`` ("carol"), never the principal label ``by``
    ("user:3"), from the session's ``control:approval_resolved`` row (issue 35)."""
    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    default_rules_ensure()
    session = services.session_create(user=alice, title="asks")
    script(tool_turn(("write_file", {"path": "r.md", "content": "x"})))
    with django_capture_on_commit_callbacks(execute=True):
        services.session_message_submit(user=alice, session=session, content="write it")
    approval = PendingApproval.objects.get(session=session, status=ApprovalStatus.PENDING)
    pending_approval_resolve(resolver=carol, decision="reject", reason="not now", request_id=approval.request_id)

    events = api(alice).get(f"/api/sessions/{session.pk}/events/").json()["results"]
    (answer,) = [e["payload"] for e in events if e["kind"] == "control:approval_resolved"]
    assert (answer["by_name"], answer["by"], answer["status"]) == ("carol", f"user:{carol.pk}", "rejected")
