"""Delegation on the real stack (daphne + qcluster, SPEC S1, S4, L12): a stop during a grandchild's
provider call ends the whole tree, an async task's ending reaches its parent exactly once even when
the worker delivering it is killed, and a cron job fires on a worker."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from skald.agents.seed import TROUBLESHOOTER_PROMPT
from tests.e2e.stack import Api, Launch, Stack, paginator_count, wait_for, wait_ready
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    SSEResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)

pytestmark = pytest.mark.e2e


def events_of(api: Api, session_id: int, kind: str) -> list[dict[str, Any]]:
    return [event for event in api.events(session_id) if event["kind"] == kind]


def task_results(api: Api, session_id: int) -> list[dict[str, Any]]:
    return [e for e in events_of(api, session_id, "tool_result") if e["payload"]["name"] == "task_completed"]


# --- a stop during a grandchild's provider call ----------------------------------------------------


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        yield fake


def _first_user(request: RecordedRequest) -> str:
    return next(m["content"] for m in request.body["messages"] if m["role"] == "user")


def _delegate(task: str) -> SSEResponse:
    arguments = json.dumps({"agent": "log-analyst", "task": task})
    return sse(tool_call_chunks([(f"call_{task.replace(' ', '_')}", "execute_task", arguments)]))


def test_a_stop_during_a_grandchilds_provider_call_ends_the_whole_tree(
    launch_stack: Launch, fake_provider: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    stack = launch_stack(fake_provider.profile_env(tmp_path_factory.mktemp("secrets")))
    wait_ready(stack)
    in_flight, release = threading.Event(), threading.Event()

    def answer(request: RecordedRequest) -> SSEResponse:
        system = request.body["messages"][0]["content"]
        task = _first_user(request)
        if system == TROUBLESHOOTER_PROMPT:
            return _delegate("level one")  # the root delegates to a child ...
        if task == "level one":
            return _delegate("level two")  # ... which delegates to a grandchild ...
        in_flight.set()  # ... whose provider call is in flight until the stop
        release.wait(30)
        return sse(text_chunks("too late"))

    fake_provider.script.clear()
    fake_provider.requests.clear()
    fake_provider.default = answer
    try:
        operator = stack.api("operator")
        session = operator.create_session()
        posted = operator.send(session["id"], "Why does checkout return 502?")
        assert in_flight.wait(90), "the grandchild's provider call never arrived"
        dispatched = len(fake_provider.requests)
        stopped = operator.client.post(f"/api/sessions/{session['id']}/stop/")
        assert stopped.status_code == 202, stopped.text
        settled = operator.wait_settled(session["id"], posted["id"], timeout=60)
    finally:
        release.set()
        fake_provider.default = None

    assert settled["outcome"] == "canceled"
    assert dispatched == 3 and len(fake_provider.requests) == 3  # nothing dispatched after the stop
    events = operator.events(session["id"])
    closed = [e for e in events if e["kind"] == "control:frame_closed"]
    assert [(e["payload"]["depth"], e["payload"]["outcome"]) for e in closed] == [(2, "canceled"), (1, "canceled")]
    assert [e["payload"]["outcome"] for e in events if e["kind"] == "subagent_result"] == ["canceled", "canceled"]
    last_assistant = max(e["seq"] for e in events if e["kind"] == "assistant")
    assert last_assistant < closed[0]["seq"]  # no model turn anywhere in the tree after the stop
    assert events[-1]["kind"] == "control:exchange_settled" and events[-1]["payload"]["outcome"] == "canceled"


# --- an async task's delivery survives a killed worker ---------------------------------------------


def _approve_write(stack: Stack, operator: Api, session_id: int) -> None:
    def parked() -> dict[str, Any] | None:
        found = [e for e in events_of(operator, session_id, "control:approval_requested")
                 if e["payload"]["name"] == "write_file"]
        return found[0] if found else None

    approval = wait_for(parked, timeout=90, what="the write_file approval")
    approver = stack.api("approver")
    resolved = approver.client.post(f"/api/tools/{approval['payload']['tool_call_id']}/resolve",
                                    json={"decision": "approve", "reason": "fine"})
    assert resolved.status_code == 202, resolved.text


def test_an_async_result_reaches_its_parent_exactly_once_when_the_delivering_worker_is_killed(
    launch_stack: Launch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    var_dir = tmp_path_factory.mktemp("var")
    first = launch_stack({"SKALD_FAILPOINTS": "delegation.before_delivery"}, var_dir=var_dir)
    wait_ready(first)
    operator = first.api("operator")
    session = operator.create_session()
    posted = operator.send(session["id"], "Checkout returns 502 after the deploy")
    # The demo playbook delegates (sync, then async) and parks on its report; the task ends while
    # its parent is parked, so its delivery waits. Approving lets the parent end: the worker that
    # ran the approval then delivers — and dies inside the delivery's transaction.
    _approve_write(first, operator, session["id"])
    operator.wait_settled(session["id"], posted["id"], timeout=90)
    wait_for(lambda: "reincarnated worker" in first.log(), timeout=90, what="the delivering worker to be killed")
    updates = [e["payload"] for e in events_of(operator, session["id"], "control:task_update")]
    assert updates and updates[-1]["status"] == "succeeded" and not updates[-1]["delivered"]
    assert not task_results(operator, session["id"])
    first.stop()

    second = launch_stack(var_dir=var_dir)  # the failpoint is gone: the retry delivers
    operator = second.api("operator")

    def delivered() -> list[dict[str, Any]] | None:
        return task_results(operator, session["id"]) or None

    (result,) = wait_for(delivered, timeout=120, what="the retried delivery")
    assert "succeeded" in result["payload"]["content"]
    resumed = operator.wait_settled(session["id"], result["exchange"], timeout=90)
    assert resumed["request_key"].endswith(":run:1:delivery") and resumed["outcome"] == "completed"
    # Exactly once: one delivery exchange, one task_completed result, one "delivered" update.
    events = operator.events(session["id"])
    assert sum(1 for e in events if e["kind"] == "tool_result" and e["payload"]["name"] == "task_completed") == 1
    assert sum(1 for e in events if e["kind"] == "control:task_update" and e["payload"]["delivered"]) == 1
    assert len({e["exchange"] for e in events if e["exchange"]}) == 2


# --- a cron job fires on a worker ------------------------------------------------------------------


def _admin(stack: Stack, username: str = "admin") -> httpx.Client:
    client = stack.http()
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token
    posted = client.post("/admin/login/?next=/admin/", data={"csrfmiddlewaretoken": token.group(1),
                                                            "username": username, "password": "e2e-demo-password-7c41",
                                                            "next": "/admin/"})
    assert posted.status_code == 302
    return client


def test_a_cron_job_fires_on_a_worker_and_its_run_is_listed(launch_stack: Launch) -> None:
    stack = launch_stack()
    wait_ready(stack)
    # The operator schedules it, with one of their conversations as its home (issue 27: a cron job's
    # results need somewhere to go).
    admin = _admin(stack, "operator")
    home = stack.api("operator").create_session("troubleshooter")
    form = admin.get("/admin/skald/scheduledjob/add/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token
    created = admin.post("/admin/skald/scheduledjob/add/", data={
        "csrfmiddlewaretoken": token.group(1), "agent": "log-analyst", "task": "look for new errors",
        "cron": "* * * * * */5", "source": "web",  # every five seconds (croniter's seconds field)
        "home_session": str(home["id"]),
        "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0",
    })
    assert created.status_code == 302, created.text[-1500:]

    def fired() -> str | None:
        page = admin.get("/admin/skald/jobrun/?status__exact=succeeded")
        return page.text if paginator_count(page.text) >= 1 else None

    # django-q2's scheduler looks every 30 s; the schedule is due every 5 s.
    listing = wait_for(fired, timeout=150, interval=1.0, what="the cron job's first run")
    assert paginator_count(listing) >= 1
    jobs = admin.get("/admin/skald/scheduledjob/").text
    assert "* * * * * */5" in jobs and re.search(r"#\d+ succeeded", jobs)
    admin.close()
