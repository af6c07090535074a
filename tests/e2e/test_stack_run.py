"""`make run` acceptance against the real stack: daphne + a qcluster, SQLite under a temporary var/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from skald.demo import DEMO_CASE_TITLE
from tests.e2e.stack import PASSWORD, Launch, Stack, paginator_count, wait_for, wait_ready

# One worker runs the whole module: its module-scoped stack boots once, not once per xdist worker.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("stack_run")]


@pytest.fixture(scope="module")
def stack(launch_stack: Launch) -> Stack:
    return launch_stack(fresh=True)  # the first start on a new machine: it migrates too


@contextmanager
def admin_login(stack: Stack, username: str = "admin") -> Iterator[httpx.Client]:
    """A browser-like admin login: the CSRF cookie and form token, then a real POST."""
    with stack.http() as client:
        yield _logged_in(client, username)


def _logged_in(client: httpx.Client, username: str) -> httpx.Client:
    page = client.get("/admin/login/")
    assert page.status_code == 200
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token and client.cookies.get("csrftoken"), "the login form carries no CSRF token"
    posted = client.post("/admin/login/?next=/admin/", data={
        "csrfmiddlewaretoken": token.group(1), "username": username, "password": PASSWORD, "next": "/admin/",
    })
    assert posted.status_code == 302, posted.text[-500:]
    assert posted.headers["location"] == "/admin/"
    return client


def test_it_prints_the_logins_and_serves_the_admin_to_the_printed_admin(stack: Stack) -> None:
    def banner() -> str | None:
        # The launcher prints once its own /healthz probe answers, which may be just after ours.
        log = stack.log()
        return log if "Skald is running." in log else None

    log = wait_for(banner, timeout=5, what="the launcher's banner")
    printed = log[log.index("Skald is running."):]
    assert "**Launch a run**" in printed  # the first step names the home page's button
    # The logins, then the URLs, are the banner's last lines (issue 35): what a person copies.
    tail = printed.split("\n\n")[1]
    assert tail.startswith("Logins (password ") and f"admin      {PASSWORD}" in tail
    assert tail.rstrip().endswith(f"ready:    {stack.base_url}/readyz")
    assert f"home:     {stack.base_url}/admin/" in tail
    with admin_login(stack) as client:
        index = client.get("/admin/")
        assert index.status_code == 200
        assert "<title>Home | Skald</title>" in index.text and 'id="panel-audit"' in index.text  # every panel


def test_it_turns_ready_once_the_qcluster_is_up(stack: Stack) -> None:
    body = wait_ready(stack)
    assert body["status"] == "ready"
    assert body["workers"] == "ok" and body["clusters"] >= 1
    assert body["database"] == "ok" and body["channel_layer"] == "ok"
    assert body["gdl_provider"] == "disabled"


def test_it_issues_a_jwt_and_refuses_an_anonymous_api_call_with_a_code(stack: Stack) -> None:
    with stack.http() as anonymous:
        issued = anonymous.post("/api/auth/token/", json={"username": "operator", "password": PASSWORD})
        refused = anonymous.get("/api/sessions/")
    assert issued.status_code == 200
    token = issued.json()["access"]
    assert token.count(".") == 2 and issued.json()["refresh"].count(".") == 2
    assert refused.status_code == 401
    assert refused.json()["code"] == "not_authenticated"
    with stack.http(token) as operator:
        assert operator.get("/api/sessions/").status_code == 200


def test_sigterm_leaves_no_process_and_a_restart_reuses_the_data(stack: Stack, launch_stack: Launch) -> None:
    api = stack.api("operator")
    session = api.create_session()
    token = stack.token("operator")
    first_case = re.search(r"Demo case: #(\d+)", stack.log())
    assert first_case

    stack.stop()  # asserts exit 0 and no daphne / qcluster process left

    again = launch_stack(var_dir=stack.var_dir)
    # The seed's report is part of the banner, printed once the launcher's own probe answers.
    wait_for(lambda: "Skald is running." in again.log(), timeout=5, what="the restarted launcher's banner")
    assert "users existed already" in again.log()
    assert f"Demo case: #{first_case.group(1)}\n" in again.log()  # the same case, not a second one
    with again.http(token) as operator:  # the embedded secret key survived under var/ too
        sessions = operator.get("/api/sessions/")
    assert sessions.status_code == 200
    assert [row["id"] for row in sessions.json()] == [session["id"]]
    with admin_login(again) as admin:
        assert paginator_count(admin.get("/admin/auth/user/").text) == 5
        cases = admin.get("/admin/skald/case/").text
        assert paginator_count(cases) == 1
        assert DEMO_CASE_TITLE in cases
