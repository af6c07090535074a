"""Issue 27's seven reproductions through the HTTP API on the real worker path, on both databases:
one stack for the module.

``python -m skald.launcher`` (daphne, the qcluster with its workers, the sweeper) on SQLite in the
SQLite pass and on a PostgreSQL database of its own in the PostgreSQL pass (``db_sensitive``), with a
fake OpenAI-compatible model, the deployment's budget ``SKALD_LOOP_BOUNDS={"budget_tokens": 600}``, a
compaction policy only a long conversation reaches (``COMPACTION``) and a 3 s lease, so a killed
worker's exchange is recovered soon.
Every task below runs on a qcluster worker (no ``SKALD_SYNC_TASKS``); users act through the API only:

1. an async child granted ``write_file`` parks on it, is approved, and its next request offers only
   its grant; so does the request of a child recovered after its worker was SIGKILLed mid-turn;
2. an async child spends from its root's 600 (120 tokens a call): the tree never spends a fresh 600;
3. an organisation's tripwire pattern in an async task's text never reaches the child's model, and
   an async task's frame compacts with the deployment's ``SKALD_COMPACTION``, never the default;
4. that task ends ``refused``, its ending is delivered once, the task list shows it, and a task beside
   it is delivered too;
5. a child whose provider answers 503 ends ``provider_failed``; its parent reads that and completes
   (a sync child in its parent's exchange; an async one in the turn its delivery resumes);
6. cancelling a task parked on an approval withdraws the approval (answering is 409), ends the task
   ``cancelled`` at once and delivers that ending;
7. a cron run's ending carries its output to its home conversation; a cron job without a home is
   refused.

The models are routed by what a request is (its system prompt and its first user message), so each
test's conversations have their own script. Nothing asserts an elapsed time: every wait is for rows,
events or the fake model's requests, with a guard against a hang.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from loop.compaction.prompt import SYSTEM_PROMPT as SUMMARY_PROMPT
from skald.agents.seed import LOG_ANALYST_PROMPT, TROUBLESHOOTER_PROMPT
from tests.e2e.stack import PASSWORD, Api, Launch, Stack, connected_to, paginator_count, wait_for, wait_ready
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Response,
    StatusResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.db_sensitive, pytest.mark.xdist_group("stack_frames")]

GUARD = 120.0  # a hang guard on every wait, never an assertion about speed
BUDGET = 600
ACME_KEY = "ACME-0123456789ABCDEF01234567"  # the organisation's own secret shape (its pattern below)
# The deployment's compaction policy: a conversation compacts once 800 tokens lie outside a 300-token
# tail, which only the long child of the last test reaches (that test, run last, finds no other
# conversation of the module compacted); the default (16k outside a 20k tail) compacts none of them.
# The summary's size is the policy's fingerprint on the wire (the request's ``max_tokens``).
COMPACTION = {"threshold_tokens": 800, "keep_tokens": 300, "summary_max_tokens": 321}

Route = Callable[[RecordedRequest], Response]
UNROUTED = "noted"  # the fake model's answer to a request no test routed (a compaction's summary too)


# --- the module's stack ---------------------------------------------------------------------------------


class Models:
    """The fake provider's one answer: routed by (system prompt, first user message) to a test's
    script; a request nobody routed (a previous test's late delivery) gets a plain text turn."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Route] = {}
        self.lock = threading.Lock()

    def add(self, system: str, first_user: str, route: Route) -> None:
        with self.lock:
            self.routes[(system, first_user)] = route

    def __call__(self, request: RecordedRequest) -> Response:
        with self.lock:
            route = self.routes.get((system_of(request), first_user(request)))
        return route(request) if route is not None else sse(text_chunks(UNROUTED))


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        yield fake


@pytest.fixture(scope="module")
def models(fake_provider: FakeOpenAIServer) -> Models:
    router = Models()
    fake_provider.default = router
    return router


@pytest.fixture(scope="module")
def stack(fake_provider: FakeOpenAIServer, models: Models, postgres: str, launch_stack: Launch,
          tmp_path_factory: pytest.TempPathFactory) -> Stack:
    # The PostgreSQL database first: fixtures end in reverse, so the stack stops before it is dropped.
    env = {**fake_provider.profile_env(tmp_path_factory.mktemp("secrets")),
           "SKALD_LOOP_BOUNDS": json.dumps({"budget_tokens": BUDGET}), "SKALD_SWEEP_SECONDS": "1",
           "SKALD_COMPACTION": json.dumps(COMPACTION), "SKALD_LEASE_SECONDS": "3"}
    if postgres:
        env["DATABASE_URL"] = postgres
    stack = launch_stack(env)
    wait_ready(stack, timeout=GUARD)
    return stack


@pytest.fixture(scope="module")
def admin(stack: Stack) -> Iterator[httpx.Client]:
    with stack.http(stack.token("admin")) as client:
        yield client


def analyst_budget(admin: httpx.Client, budget: int | None) -> None:
    """An admin sets the log analyst's default budget (None: the deployment's) through the policy API."""
    listed = admin.get("/api/policy/agents/").json()
    row = next(a for a in (listed["results"] if isinstance(listed, dict) else listed) if a["name"] == "log-analyst")
    bounds = {} if budget is None else {"budget_tokens": budget}
    patched = admin.patch(f"/api/policy/agents/{row['id']}/", json={"bounds": bounds},
                          headers={"If-Match": row["etag"]})
    assert patched.status_code == 200, patched.text


# --- reading requests and the API -----------------------------------------------------------------------


def system_of(request: RecordedRequest) -> str:
    return str(request.body["messages"][0]["content"])


def first_user(request: RecordedRequest) -> str:
    return next((str(m["content"]) for m in request.body["messages"] if m["role"] == "user"), "")


def offered(request: RecordedRequest) -> list[str]:
    return sorted(tool["function"]["name"] for tool in request.body.get("tools") or [])


def answered(request: RecordedRequest) -> bool:
    """Whether the model already spoke in this conversation (a later turn, or a delivery)."""
    return any(m["role"] == "assistant" for m in request.body["messages"])


def call(name: str, arguments: dict[str, Any], *, usage: tuple[int, int] = (20, 9)) -> Response:
    return sse(tool_call_chunks([(f"call_{name}_{abs(hash(json.dumps(arguments))) % 10**8}", name,
                                  json.dumps(arguments))], usage=usage))


def then_text(first: Response, text: str) -> Route:
    """A conversation's model that makes one call, then answers ``text`` with what it read."""

    def answer(request: RecordedRequest) -> Response:
        if not answered(request):
            return first
        last = request.body["messages"][-1]
        return sse(text_chunks(f"{text}: {str(last.get('content'))[:80]}"))

    return answer


def pending(approver: httpx.Client, session_id: int) -> list[dict[str, Any]]:
    response = approver.get("/api/approvals/", params={"session": session_id, "status": "pending"})
    assert response.status_code == 200, response.text
    body = response.json()
    return list(body["results"] if isinstance(body, dict) else body)


def parked_on(approver: httpx.Client, session_id: int, tool: str) -> dict[str, Any]:
    return wait_for(lambda: next((a for a in pending(approver, session_id) if a["tool"] == tool), None),
                    timeout=GUARD, interval=0.2, what=f"session {session_id} to park on {tool}")


def approve(approver: httpx.Client, card: dict[str, Any]) -> None:
    answer = approver.post(f"/api/approvals/{card['request_id']}/resolve", json={"decision": "approve", "reason": "ok"})
    assert answer.status_code in (200, 202), answer.text


def approve_delegation(approver: httpx.Client, session_id: int, tool: str, operator: Api, exchange_id: int) -> None:
    """Approve the root's delegation call when the rules park it (the demo allows ``execute_task`` to
    the log analyst without a human): wait until it parked or the delegation is past."""

    def parked_or_past() -> str | None:
        if any(a["tool"] == tool for a in pending(approver, session_id)):
            return "parked"
        row = operator.exchange(session_id, exchange_id)
        results = [e for e in operator.events(session_id) if e["kind"] == "tool_result"
                   and e["payload"].get("name") == tool]
        return "past" if results or row["status"] in ("settled", "broken") else None

    if wait_for(parked_or_past, timeout=GUARD, interval=0.2, what=f"the {tool} call") == "parked":
        approve(approver, parked_on(approver, session_id, tool))


WRITE = call("write_file", {"path": "notes.md", "content": "pool exhausted"})


def tasks_of(operator: Api, session_id: int) -> list[dict[str, Any]]:
    response = operator.client.get("/api/web/tasks", params={"limit": 100})
    assert response.status_code == 200, response.text
    return [t for t in response.json()["results"] if t["parent_session"] == session_id]


def task_of(operator: Api, session_id: int) -> dict[str, Any]:
    (task,) = wait_for(lambda: tasks_of(operator, session_id) or None, timeout=GUARD, what="the task")
    return task


def events_of(operator: Api, session_id: int, kind: str) -> list[dict[str, Any]]:
    return [e for e in operator.events(session_id) if e["kind"] == kind]


def deliveries(operator: Api, session_id: int) -> list[dict[str, Any]]:
    return [e for e in events_of(operator, session_id, "tool_result") if e["payload"].get("name") == "task_completed"]


def delivered(operator: Api, session_id: int, count: int = 1) -> list[dict[str, Any]]:
    return wait_for(lambda: (found := deliveries(operator, session_id)) and len(found) >= count and found,
                    timeout=GUARD, what=f"{count} deliveries to session {session_id}")


def delivered_updates(operator: Api, session_id: int) -> list[dict[str, Any]]:
    return [e["payload"] for e in events_of(operator, session_id, "control:task_update") if e["payload"]["delivered"]]


def requests_of(fake: FakeOpenAIServer, system: str, task: str) -> list[RecordedRequest]:
    return [r for r in list(fake.requests) if system_of(r) == system and first_user(r) == task]


def writer_parked(operator: Api, approver: httpx.Client, models: Models, message: str, task: str,
                  child: Route | None = None) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The root starts an async child of its own definition granted ``write_file`` only (approved),
    and the child parks on its write: (the root's conversation, its task, the write's approval).
    ``child`` is the child's model (its first answer must be the write); by default it then answers."""
    models.add(TROUBLESHOOTER_PROMPT, message,
               then_text(call("execute_subtask", {"task": task, "tools": ["write_file"], "mode": "async"}), "started"))
    models.add(TROUBLESHOOTER_PROMPT, task, child or then_text(WRITE, "written"))
    session = operator.create_session()
    posted = operator.send(session["id"], message)
    approve_delegation(approver, session["id"], "execute_subtask", operator, posted["id"])
    job = task_of(operator, session["id"])
    return session, job, parked_on(approver, job["child_session"], "write_file")


# --- 1. an async child's tools stay its grant after an approval -----------------------------------------


def test_an_async_childs_next_request_after_an_approval_offers_only_its_grant(
        stack: Stack, operator: Api, approver: httpx.Client, models: Models, fake_provider: FakeOpenAIServer) -> None:
    task = "note the pool finding in the background"
    session, job, card = writer_parked(operator, approver, models, "repro 1: note it", task)
    assert job["tools"] == ["write_file"]  # the grant, recorded at spawn

    approve(approver, card)  # the child's write runs on a worker, then its next turn
    (result,) = delivered(operator, session["id"])

    assert "succeeded" in result["payload"]["content"]
    asked = requests_of(fake_provider, TROUBLESHOOTER_PROMPT, task)
    assert len(asked) == 2, [offered(r) for r in asked]  # before the approval and after it
    assert all(offered(r) == ["write_file"] for r in asked), [offered(r) for r in asked]


def test_an_async_child_recovered_after_its_worker_was_killed_mid_turn_offers_only_its_grant(
        stack: Stack, operator: Api, approver: httpx.Client, models: Models, fake_provider: FakeOpenAIServer) -> None:
    """The child's turn after the approval runs on a worker that is SIGKILLed while the model holds
    its answer; another worker recovers the child (its lease lapsed) and asks the model again."""
    task = "note the pool finding, across a crash"
    in_flight, release = threading.Event(), threading.Event()

    def child(request: RecordedRequest) -> Response:
        asked = len(requests_of(fake_provider, TROUBLESHOOTER_PROMPT, task))  # this request included
        if asked == 1:
            return WRITE
        if asked == 2:  # the turn after the approval: held until its worker is dead
            in_flight.set()
            return sse(text_chunks("written before the crash"), hold=release)
        return sse(text_chunks("written after the crash"))

    session, job, card = writer_parked(operator, approver, models, "repro 1: note it across a crash", task, child)
    assert job["tools"] == ["write_file"]
    reincarnated = stack.log().count("reincarnated worker")
    try:
        approve(approver, card)
        assert in_flight.wait(GUARD), "the child's turn after the approval never reached the model"
        (worker,) = wait_for(lambda: (found := connected_to(stack.process.pid, fake_provider.port))
                             and len(found) == 1 and found, timeout=GUARD, what="the worker in the held call")
        os.kill(worker.pid, signal.SIGKILL)
        wait_for(lambda: stack.log().count("reincarnated worker") > reincarnated, timeout=GUARD,
                 what="django-q2 to replace the killed worker")
        (result,) = delivered(operator, session["id"])
    finally:
        release.set()

    assert "written after the crash" in result["payload"]["content"]  # the recovered child answered
    asked = requests_of(fake_provider, TROUBLESHOOTER_PROMPT, task)
    assert len(asked) >= 3, [offered(r) for r in asked]  # before the approval, the held turn, the recovery
    assert all(offered(r) == ["write_file"] for r in asked), [offered(r) for r in asked]  # never the agent's 11


# --- 2. an async child spends from its root's budget ------------------------------------------------------


def test_an_async_child_spends_from_its_roots_budget_and_the_tree_never_gets_a_fresh_one(
        stack: Stack, operator: Api, approver: httpx.Client, admin: httpx.Client, models: Models,
        fake_provider: FakeOpenAIServer) -> None:
    """600 for the tree, 120 tokens a call: the root's delegation spends 120 and the task reserves
    the 480 left (its own bound is the deployment's 600); it stops at 480. Before the fix the task
    got a fresh 600 and the tree spent 960."""
    analyst_budget(admin, None)
    task = "dig through the logs with the tree's budget"
    usage = (60, 60)
    models.add(TROUBLESHOOTER_PROMPT, "repro 2: dig",
               then_text(call("execute_task", {"agent": "log-analyst", "task": task, "mode": "async"}, usage=usage),
                         "started"))
    steps = iter(range(1000))
    models.add(LOG_ANALYST_PROMPT, task,
               lambda request: call("scratchpad_set", {"key": f"k{next(steps)}", "value": "v"}, usage=usage))
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 2: dig")
    approve_delegation(approver, session["id"], "execute_task", operator, posted["id"])
    job = task_of(operator, session["id"])
    delivered(operator, session["id"])
    root = operator.wait_settled(session["id"], posted["id"], timeout=GUARD)

    child_exchanges = {e["exchange"] for e in operator.events(job["child_session"]) if e["exchange"]}
    (child_exchange,) = child_exchanges
    child = operator.exchange(job["child_session"], child_exchange)
    child_spent = child["input_tokens"] + child["output_tokens"]
    root_spent = root["input_tokens"] + root["output_tokens"]
    assert child["outcome"] == "budget_exceeded"
    assert child_spent == BUDGET - 120 == 120 * len(requests_of(fake_provider, LOG_ANALYST_PROMPT, task))
    assert root_spent + child_spent <= BUDGET  # one budget for the tree, never 960


# --- 3 and 4. an organisation's pattern in an async task's text; its ending is delivered ------------------


@pytest.fixture(scope="module")
def acme_pattern(admin: httpx.Client) -> None:
    """An admin adds the organisation's own credential shape through the policy API."""
    made = admin.post("/api/policy/tripwires/patterns/",
                      json={"name": "acme-key", "regex": r"ACME-[0-9A-F]{24}", "keywords": "acme-"})
    assert made.status_code == 201, made.text


def test_an_organisation_pattern_in_an_async_tasks_text_never_reaches_the_childs_model(
        stack: Stack, operator: Api, approver: httpx.Client, admin: httpx.Client, models: Models,
        fake_provider: FakeOpenAIServer, acme_pattern: None) -> None:
    analyst_budget(admin, 100)
    task = f"repro 3: try the key {ACME_KEY}"
    models.add(TROUBLESHOOTER_PROMPT, "repro 3: use the key",
               then_text(call("execute_task", {"agent": "log-analyst", "task": task, "mode": "async"}), "started"))
    models.add(LOG_ANALYST_PROMPT, task, lambda request: sse(text_chunks("I used the key")))
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 3: use the key")
    approve_delegation(approver, session["id"], "execute_task", operator, posted["id"])
    delivered(operator, session["id"])

    (job,) = tasks_of(operator, session["id"])
    assert job["status"] == "refused" and "org:acme-key" in job["run"]["error"]
    assert not [r for r in list(fake_provider.requests) if system_of(r) == LOG_ANALYST_PROMPT
                and "repro 3" in first_user(r)]  # the child's model was never called
    assert all(ACME_KEY not in json.dumps(r.body) for r in list(fake_provider.requests))


def test_a_refused_tasks_ending_is_delivered_once_and_never_blocks_the_others(
        stack: Stack, operator: Api, approver: httpx.Client, admin: httpx.Client, models: Models,
        acme_pattern: None) -> None:
    """Its delivery used to raise ``InputRefused`` on every sweep, leaving the task ``running`` and
    starving the deliveries behind it."""
    analyst_budget(admin, 100)
    poisoned, plain = f"repro 4: use {ACME_KEY}", "repro 4: read the logs"
    models.add(TROUBLESHOOTER_PROMPT, "repro 4: two tasks", then_text(sse(tool_call_chunks([
        ("call_poisoned", "execute_task", json.dumps({"agent": "log-analyst", "task": poisoned, "mode": "async"})),
        ("call_plain", "execute_task", json.dumps({"agent": "log-analyst", "task": plain, "mode": "async"}))])),
        "started"))
    models.add(LOG_ANALYST_PROMPT, plain, lambda request: sse(text_chunks("three 502s")))
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 4: two tasks")
    approve_delegation(approver, session["id"], "execute_task", operator, posted["id"])
    results = delivered(operator, session["id"], 2)

    assert len(results) == 2
    texts = " ".join(r["payload"]["content"] for r in results)
    assert "REFUSED before it ran" in texts and "three 502s" in texts and ACME_KEY not in texts
    assert len(delivered_updates(operator, session["id"])) == 2  # each ending delivered once
    listed = {t["task"][:20]: t for t in tasks_of(operator, session["id"])}
    refused = next(t for t in listed.values() if t["status"] == "refused")
    assert refused["run"]["delivered"] and ACME_KEY not in json.dumps(refused["run"])
    assert not [t for t in listed.values() if t["status"] == "running"]

    # Nothing is delivered twice by the sweeps that come after (every second here): once both
    # deliveries' exchanges settled, a follow-up exchange runs after the sweeps of that time.
    for result in results:
        operator.wait_settled(session["id"], result["exchange"], timeout=GUARD)
    followup = operator.send(session["id"], "repro 4: anything else?")
    operator.wait_settled(session["id"], followup["id"], timeout=GUARD)
    assert len(deliveries(operator, session["id"])) == 2


# --- 5. a child's provider failure is the child's -----------------------------------------------------------


def test_a_childs_provider_failure_ends_it_provider_failed_and_its_parent_reads_it(
        stack: Stack, operator: Api, approver: httpx.Client, models: Models, fake_provider: FakeOpenAIServer) -> None:
    task = "repro 5: read the logs for me"
    models.add(TROUBLESHOOTER_PROMPT, "repro 5: why 502?",
               then_text(call("execute_task", {"agent": "log-analyst", "task": task}), "the analyst is down"))
    models.add(LOG_ANALYST_PROMPT, task,
               lambda request: StatusResponse(503, {"error": {"message": "service unavailable"}}))
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 5: why 502?")
    approve_delegation(approver, session["id"], "execute_task", operator, posted["id"])
    root = operator.wait_settled(session["id"], posted["id"], timeout=GUARD)

    assert root["outcome"] == "completed" and root["error_code"] in (None, "")  # not budget_exceeded
    closed = [e["payload"] for e in events_of(operator, session["id"], "control:frame_closed")]
    assert [(c["depth"], c["outcome"]) for c in closed] == [(1, "provider_failed")]
    root_requests = requests_of(fake_provider, TROUBLESHOOTER_PROMPT, "repro 5: why 502?")
    assert len(root_requests) == 2
    assert "provider_failed" in json.dumps(root_requests[1].body["messages"][-1])  # the parent read it
    replies = [e["payload"]["content"] for e in events_of(operator, session["id"], "assistant")]
    assert any(reply.startswith("the analyst is down") for reply in replies)


def test_an_async_childs_provider_failure_is_delivered_as_its_own_and_the_root_completes(
        stack: Stack, operator: Api, approver: httpx.Client, admin: httpx.Client, models: Models) -> None:
    analyst_budget(admin, 100)
    task = "repro 5: read the logs in the background"
    models.add(TROUBLESHOOTER_PROMPT, "repro 5: why 502, later?",
               then_text(call("execute_task", {"agent": "log-analyst", "task": task, "mode": "async"}), "read"))
    models.add(LOG_ANALYST_PROMPT, task,
               lambda request: StatusResponse(503, {"error": {"message": "service unavailable"}}))
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 5: why 502, later?")
    approve_delegation(approver, session["id"], "execute_task", operator, posted["id"])
    (result,) = delivered(operator, session["id"])
    resumed = operator.wait_settled(session["id"], result["exchange"], timeout=GUARD)

    assert operator.exchange(session["id"], posted["id"])["outcome"] == "completed"
    content = result["payload"]["content"]
    assert "FAILED: the model provider failed" in content and "HTTP 503" in content  # its own failure
    assert resumed["outcome"] == "completed"  # the parent read its task's failure and answered
    (job,) = tasks_of(operator, session["id"])
    assert job["status"] == "failed" and job["run"]["delivered"]


# --- 6. cancelling a task parked on an approval ---------------------------------------------------------------


def test_cancelling_a_task_parked_on_an_approval_withdraws_it_and_delivers_cancelled(
        stack: Stack, operator: Api, approver: httpx.Client, models: Models) -> None:
    session, job, card = writer_parked(operator, approver, models, "repro 6: note it", "repro 6: write it down")

    cancelled = operator.client.post(f"/api/web/tasks/{job['id']}/cancel")

    assert cancelled.status_code == 202, cancelled.text
    now = cancelled.json()  # at once: no approver answered, no worker ran
    assert now["status"] == "cancelled" and now["run"]["status"] == "cancelled"
    assert not tasks_of(operator, session["id"])  # no longer running (a cancellation is no failure)
    answer = approver.post(f"/api/approvals/{card['request_id']}/resolve", json={"decision": "approve", "reason": "ok"})
    assert answer.status_code == 409, answer.text
    (result,) = delivered(operator, session["id"])
    assert "cancelled" in result["payload"]["content"]
    assert len(delivered_updates(operator, session["id"])) == 1
    stops = [e["payload"] for e in events_of(operator, job["child_session"], "canceled")]
    assert stops == [{"reason": "the task was cancelled", "cause": "withdrawn"}]


# --- 7. a cron run's output reaches its home -------------------------------------------------------------------


CRON_JOBS = "/admin/skald/scheduledjob/?kind__exact=cron"


def _admin_site(stack: Stack, username: str) -> httpx.Client:
    client = stack.http()
    page = client.get("/admin/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token
    posted = client.post("/admin/login/?next=/admin/", data={"csrfmiddlewaretoken": token.group(1),
                                                            "username": username, "password": PASSWORD,
                                                            "next": "/admin/"})
    assert posted.status_code == 302
    return client


def _add_cron_job(site: httpx.Client, task: str, home: str) -> httpx.Response:
    form = site.get("/admin/skald/scheduledjob/add/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text)
    assert token
    return site.post("/admin/skald/scheduledjob/add/", data={
        "csrfmiddlewaretoken": token.group(1), "agent": "log-analyst", "task": task,
        "cron": "* * * * * */5", "source": "web", "home_session": home,  # every five seconds
        "runs-TOTAL_FORMS": "0", "runs-INITIAL_FORMS": "0", "runs-MIN_NUM_FORMS": "0", "runs-MAX_NUM_FORMS": "0",
    })


def test_a_cron_runs_output_reaches_its_home_and_a_job_without_a_home_is_refused(
        stack: Stack, operator: Api, admin: httpx.Client, models: Models) -> None:
    site = _admin_site(stack, "operator")
    task = "repro 7: look for new errors"
    models.add(LOG_ANALYST_PROMPT, task, lambda request: sse(text_chunks("two new 502s at 03:00 from the pool")))

    before = paginator_count(site.get(CRON_JOBS).text)
    refused = _add_cron_job(site, "repro 7: nowhere to go", home="")
    assert refused.status_code == 200 and "needs a home for its results" in refused.text  # the form again
    assert paginator_count(site.get(CRON_JOBS).text) == before  # nothing was stored

    home = operator.create_session()
    created = _add_cron_job(site, task, home=str(home["id"]))
    assert created.status_code == 302, created.text[-1500:]

    def arrived() -> dict[str, Any] | None:
        updates = [e["payload"] for e in events_of(operator, home["id"], "control:task_update")
                   if e["payload"]["kind"] == "cron" and e["payload"]["delivered"]]
        return updates[0] if updates else None

    # django-q2's scheduler looks every 30 s; the schedule is due every 5 s.
    update = wait_for(arrived, timeout=150, interval=1.0, what="a cron run's ending in its home")
    jobs = site.get(CRON_JOBS).text
    job_id = re.search(r'/admin/skald/scheduledjob/(\d+)/change/', jobs)
    assert job_id
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', jobs)
    assert token
    stopped = site.post("/admin/skald/scheduledjob/", data={"csrfmiddlewaretoken": token.group(1),
                                                            "action": "cancel_jobs",
                                                            "_selected_action": [job_id.group(1)]})
    assert stopped.status_code == 302
    site.close()

    assert update["status"] == "succeeded" and update["output"] == "two new 502s at 03:00 from the pool"
    child = operator.client.get(f"/api/sessions/{update['child_session']}/events/")
    assert child.status_code == 200  # the firing's own conversation, linked from the home


# --- 3, last: an async task compacts with the deployment's policy ----------------------------------------


def finding(n: int) -> str:
    """A scratchpad value of about 290 tokens: a long conversation is a few of them."""
    return f"web-{n} pool_{n} exhausted at 03:{n:02} after deploy 4.{n}.1, request req_{n}a9 waited. " * 10


def test_an_async_tasks_frame_compacts_with_the_deployments_policy_never_the_default(
        stack: Stack, operator: Api, approver: httpx.Client, models: Models, fake_provider: FakeOpenAIServer) -> None:
    """Six findings of ~290 tokens cross ``COMPACTION``'s 800 outside its 300-token tail; under the
    default policy this conversation never compacts. Before the fix an async task compacted with
    the default, so it never compacted here."""
    task = "keep six findings in the scratchpad"
    rounds = 6  # and an answer: seven turns, within the default eight
    asked_child: list[RecordedRequest] = []

    def child(request: RecordedRequest) -> Response:
        asked_child.append(request)
        asked = len(asked_child)
        if asked <= rounds:
            return call("scratchpad_set", {"key": f"finding{asked}", "value": finding(asked)}, usage=(1, 1))
        return sse(text_chunks(f"{rounds} findings kept", usage=(1, 1)))

    models.add(TROUBLESHOOTER_PROMPT, "repro 3: keep the findings",
               then_text(call("execute_subtask", {"task": task, "tools": ["scratchpad_set"], "mode": "async"}),
                         "started"))
    models.add(TROUBLESHOOTER_PROMPT, task, child)
    # Once compacted, the child's window opens with the summary (the unrouted answer) instead of its task.
    models.add(TROUBLESHOOTER_PROMPT, f"[compaction summary]\n{UNROUTED}", child)
    session = operator.create_session()
    posted = operator.send(session["id"], "repro 3: keep the findings")
    approve_delegation(approver, session["id"], "execute_subtask", operator, posted["id"])
    job = task_of(operator, session["id"])
    (result,) = delivered(operator, session["id"])

    assert f"{rounds} findings kept" in result["payload"]["content"], result["payload"]["content"][:600]
    compactions = events_of(operator, job["child_session"], "compaction")
    assert compactions, "the child's long conversation never compacted"
    summaries = [r for r in list(fake_provider.requests) if system_of(r) == SUMMARY_PROMPT]
    assert len(summaries) == len(compactions)  # no other conversation of the module compacted (this runs last)
    assert all(r.body["max_tokens"] == COMPACTION["summary_max_tokens"] for r in summaries)  # the deployment's
    assert task in first_user(summaries[0])  # the child's conversation was summarised
    assert len(asked_child) == rounds + 1 and all(offered(r) == ["scratchpad_set"] for r in asked_child)
