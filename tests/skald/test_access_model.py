"""The session access model (docs/access-model.md, issue 11 §1), pinned route by route.

The expected table is written out here, independently of :mod:`skald.sessions.access`: every
session route by anonymous, no role, each role alone, by own session vs. another user's, over REST;
the websocket's connect and ``stop`` frame the same way. Then two properties: whoever's message is
admitted is its audit actor and the principal of its turn (never the session's owner in their place).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from audit.kinds import AuditKind
from audit.models import AuditEvent
from loop.models import Exchange, Session
from skald.agents.seed import seed_agents
from skald.loop_adapters.runtime import build_env
from skald.sessions import services
from tests.conftest import make_user
from tests.strength import examples

# caller → their roles (each role alone); "anonymous" sends no credential.
CALLERS: dict[str, tuple[str, ...]] = {
    "anonymous": (), "charlie": (), "alice": ("operator",), "carol": ("approver",), "bob": ("reviewer",),
    "dave": ("auditor",), "wendy": ("workflow",),
}
CONVERSING = {"alice", "carol", "bob", "wendy"}
READ_ANY = {"alice", "dave"}
STOP_ANY = {"alice"}

# route → (method, path template, action); {s} is the session, {e} its exchange.
ROUTES: dict[str, tuple[str, str, str]] = {
    "detail": ("get", "/api/sessions/{s}/", "read"),
    "exchange": ("get", "/api/sessions/{s}/exchanges/{e}/", "read"),
    "events": ("get", "/api/sessions/{s}/events/", "read"),
    "message": ("post", "/api/sessions/{s}/messages/", "write"),
    "stop": ("post", "/api/sessions/{s}/stop/", "stop"),
}
OK = {"read": 200, "write": 202, "stop": 202}
REFUSED = {"write": "session_write_forbidden", "stop": "session_stop_forbidden"}


def expected(caller: str, whose: str, action: str) -> tuple[int, str | None]:
    """The table of docs/access-model.md: (status, error code)."""
    if caller == "anonymous":
        return 401, "not_authenticated"
    if caller == "charlie":
        return 403, "permission_denied"
    own = whose == "own"
    readable = own or caller in READ_ANY
    if not readable:
        return 404, "session_not_found"
    allowed = {
        "read": True,
        "write": own and caller in CONVERSING,
        "stop": (own and caller in CONVERSING) or caller in STOP_ANY,
    }[action]
    return (OK[action], None) if allowed else (403, REFUSED[action])


@pytest.fixture
def people(db: None) -> dict[str, User]:
    seed_agents()
    people = {name: make_user(name, *roles) for name, roles in CALLERS.items() if name != "anonymous"}
    people["owen"] = make_user("owen", "workflow")  # owns the "other" session
    return people


def open_session(owner: User) -> tuple[Session, Exchange]:
    """A session with one settled-looking exchange to read (admitted by its owner)."""
    session = services.session_create(user=owner, title="t")
    exchange, _ = services.session_message_submit(user=owner, session=session, content="first")
    Exchange.objects.filter(pk=exchange.pk).update(status="settled")
    return session, exchange


@pytest.mark.parametrize("route", sorted(ROUTES))
@pytest.mark.parametrize("whose", ["own", "other"])
@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_it_answers_each_route_as_the_access_table_says(api, people, caller, whose, route):
    user = people.get(caller)
    owner = user if whose == "own" and user is not None else people["owen"]
    session, exchange = open_session(owner)
    method, template, action = ROUTES[route]
    if route == "stop":  # something to stop
        Exchange.objects.filter(pk=exchange.pk).update(status="open")
    url = template.format(s=session.pk, e=exchange.pk)
    body = {"content": "hello"} if route == "message" else {}
    response = getattr(api(user), method)(url, body, format="json")
    status, code = expected(caller, whose, action)
    assert response.status_code == status, (caller, whose, route, response.json())
    if code is not None:
        assert response.json()["code"] == code


@pytest.mark.parametrize("caller", sorted(CALLERS))
def test_it_lists_and_creates_as_the_access_table_says(api, people, caller):
    user = people.get(caller)
    own = open_session(user)[0] if caller in CONVERSING else None
    other = open_session(people["owen"])[0]
    listed = api(user).get("/api/sessions/")
    created = api(user).post("/api/sessions/", {"title": "mine"}, format="json")
    if caller == "anonymous":
        assert (listed.status_code, created.status_code) == (401, 401)
        return
    if caller == "charlie":
        assert (listed.status_code, created.status_code) == (403, 403)
        return
    ids = {row["id"] for row in listed.json()}
    assert (other.pk in ids) == (caller in READ_ANY)
    assert own is None or own.pk in ids
    if caller in CONVERSING:
        assert created.status_code == 201 and created.json()["owner"] == user.pk
    else:
        assert (created.status_code, created.json()["code"]) == (403, "session_create_forbidden")


def test_an_auditor_may_not_write_even_to_a_session_they_own(api, people):
    # A session from before dave became an auditor: reading it is fine, running tools is not.
    session = services.session_create(user=people["dave"], title="old")
    response = api(people["dave"]).post(f"/api/sessions/{session.pk}/messages/", {"content": "hi"}, format="json")
    assert (response.status_code, response.json()["code"]) == (403, "session_write_forbidden")
    assert api(people["dave"]).get(f"/api/sessions/{session.pk}/").status_code == 200
    assert not Exchange.objects.filter(session=session).exists()


def test_an_operators_stop_of_another_users_session_names_the_operator(api, people):
    session, exchange = open_session(people["owen"])
    Exchange.objects.filter(pk=exchange.pk).update(status="open")
    assert api(people["alice"]).post(f"/api/sessions/{session.pk}/stop/", {}, format="json").status_code == 202
    row = AuditEvent.objects.filter(kind=AuditKind.EXCHANGE_CANCEL_REQUESTED, subject_id=str(exchange.pk)).get()
    assert (row.actor_type, row.actor_id) == ("user", str(people["alice"].pk))


# --- property: the audit actor and the turn's principal are the caller -----------------------------------


def admitted_by_caller(exchange_id: int, caller: User) -> None:
    exchange = Exchange.objects.select_related("session").get(pk=exchange_id)
    row = AuditEvent.objects.get(kind=AuditKind.EXCHANGE_ADMITTED, subject_id=str(exchange.pk))
    assert (row.actor_type, row.actor_id) == ("user", str(caller.pk))
    scope = build_env(exchange.session, exchange_id=exchange.pk).scope  # what the worker will run as
    assert (scope.principal, scope.user_id) == (f"user:{caller.pk}", caller.pk)


@hsettings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attempts=st.lists(st.tuples(st.sampled_from(sorted(CALLERS)), st.sampled_from([*sorted(CALLERS), "owen"]),
                                   st.sampled_from(["fresh-key", "same-key", "no-key"])), min_size=1, max_size=6))
def test_every_admitted_exchange_is_audited_as_and_runs_as_its_caller(api, people, attempts: list[Any]):
    for caller, owner_name, key_kind in attempts:
        owner = people.get(owner_name) or people["owen"]
        session = Session.objects.filter(owner=owner).order_by("-pk").first() or services.session_create(
            user=owner, title="p")
        Exchange.objects.filter(session=session).update(status="settled")  # never busy
        headers = {"HTTP_IDEMPOTENCY_KEY": "k-same"} if key_kind == "same-key" else (
            {"HTTP_IDEMPOTENCY_KEY": f"k-{Exchange.objects.count()}"} if key_kind == "fresh-key" else {})
        before = Exchange.objects.count()
        response = api(people.get(caller)).post(f"/api/sessions/{session.pk}/messages/", {"content": "go"},
                                                format="json", **headers)
        assert response.status_code in (202, 401, 403, 404), response.json()
        if response.status_code == 202:
            admitted_by_caller(response.json()["id"], people[caller])
        else:  # a refusal stores nothing
            assert Exchange.objects.count() == before


def test_an_operators_back_referral_runs_under_the_operators_groups_not_the_launchers(api, people, settings):
    from audit.actors import Actor
    from skald.cases.runs import run_launch
    from skald.cases.services import case_create
    from skald.models import Run, RunStatus

    case = case_create(actor=Actor.system("test"), title="502s", logs=[])
    run, _ = run_launch(user=people["wendy"], case_id=case.pk, ticket="502s", launch_key="k")
    Exchange.objects.filter(session=run.session).update(status="settled")
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    response = api(people["alice"]).post(f"/workflow/runs/{run.pk}/back-referral/return", {"note": "again"},
                                         format="json")
    assert response.status_code == 202, response.json()
    newest = Exchange.objects.filter(session=run.session).order_by("-number").first()
    admitted_by_caller(newest.pk, people["alice"])
    admitted_by_caller(Exchange.objects.filter(session=run.session).order_by("number").first().pk, people["wendy"])


def test_an_approver_reads_a_session_that_asked_for_an_approval_and_nothing_more(
    people, api, script, settings, tmp_path, django_capture_on_commit_callbacks
):
    """An approver decides on the card with its context: they may read a session that asked for an
    approval (REST and the list), but never write into it or stop it, and other sessions stay hidden."""
    from approvals.models import PendingApproval
    from approvals.rules.seed import default_rules_ensure
    from loop.providers.loopback import tool_turn

    settings.SKALD_SYNC_TASKS = True
    settings.SKALD_WORKSPACE_ROOT = tmp_path / "workspaces"
    default_rules_ensure()
    owen, carol = people["owen"], people["carol"]
    asking = services.session_create(user=owen, title="asks")
    script(tool_turn(("write_file", {"path": "r.md", "content": "x"})))
    with django_capture_on_commit_callbacks(execute=True):  # the worker's turn, inline
        services.session_message_submit(user=owen, session=asking, content="write it")
    assert PendingApproval.objects.filter(session=asking).exists()
    quiet, _ = open_session(owen)

    client = api(carol)
    assert client.get(f"/api/sessions/{asking.pk}/").status_code == 200
    assert client.get(f"/api/sessions/{asking.pk}/events/").status_code == 200
    listed = {row["id"] for row in client.get("/api/sessions/").json()}
    assert asking.pk in listed and quiet.pk not in listed
    assert client.get(f"/api/sessions/{quiet.pk}/").json()["code"] == "session_not_found"
    refused = client.post(f"/api/sessions/{asking.pk}/messages/", {"content": "hi"}, format="json")
    assert (refused.status_code, refused.json()["code"]) == (403, "session_write_forbidden")
    stopped = client.post(f"/api/sessions/{asking.pk}/stop/")
    assert (stopped.status_code, stopped.json()["code"]) == (403, "session_stop_forbidden")
