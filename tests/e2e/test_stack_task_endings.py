"""An async task's failure and its cancellation each reach the parent conversation exactly once on
the real stack (daphne + qcluster, SPEC S4), also when the worker delivering the ending is killed
inside the delivery's transaction and a restarted stack retries it. (The success ending is in
``test_stack_delegation.py``.)

The models are a fake OpenAI-compatible server: the root agent starts the task with
``execute_task {"mode": "async"}`` (an approver says yes if the rules park it), the task
agent's provider call fails (a 400) or holds until the task is cancelled through the API.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from skald.agents.seed import TROUBLESHOOTER_PROMPT
from tests.e2e.stack import Api, Launch, Stack, wait_for, wait_ready
from tests.e2e.test_stack_delegation import events_of, task_results
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    Response,
    StatusResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)

pytestmark = pytest.mark.e2e

ASYNC_TASK = json.dumps({"agent": "log-analyst", "task": "scan the logs for 502s", "mode": "async"})


@pytest.fixture(scope="module")
def fake_provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(host="127.0.0.1") as fake:
        yield fake


def models(task_agent: Callable[[RecordedRequest], Response]) -> Callable[[RecordedRequest], Response]:
    """The root starts the async task once, then answers whatever its last tool result says."""

    def answer(request: RecordedRequest) -> Response:
        messages = request.body["messages"]
        if messages[0]["content"] != TROUBLESHOOTER_PROMPT:
            return task_agent(request)
        if messages[-1]["role"] != "tool":
            return sse(tool_call_chunks([("call_async", "execute_task", ASYNC_TASK)]))
        return sse(text_chunks(f"noted: {str(messages[-1]['content'])[:60]}"))

    return answer


def start_task(stack: Stack, operator: Api) -> tuple[int, dict[str, Any]]:
    """A conversation whose root started the async task (approved by a human when the rules ask
    for it) and went idle."""
    session = operator.create_session()
    posted = operator.send(session["id"], "Checkout returns 502 after the deploy")

    def ended_or_parked() -> dict[str, Any] | None:
        row = operator.exchange(session["id"], posted["id"])
        return row if row["status"] in ("parked", "settled", "broken") else None

    if wait_for(ended_or_parked, timeout=90, what="the first turn")["status"] == "parked":
        (card,) = [e for e in events_of(operator, session["id"], "control:approval_requested")
                   if e["payload"]["name"] == "execute_task"]
        resolved = stack.api("approver").client.post(f"/api/tools/{card['payload']['tool_call_id']}/resolve",
                                                     json={"decision": "approve", "reason": "go"})
        assert resolved.status_code == 202, resolved.text
    settled = operator.wait_settled(session["id"], posted["id"], timeout=90)
    assert settled["outcome"] == "completed"  # the parent did not wait for its task
    return session["id"], posted


def killed_while_delivering(stack: Stack, operator: Api, session_id: int, ending: str) -> None:
    """The ending was classified and announced, and the worker delivering it died before its commit."""
    wait_for(lambda: "reincarnated worker" in stack.log(), timeout=90, what="the delivering worker to be killed")

    def announced() -> dict[str, Any] | None:
        updates = [e["payload"] for e in events_of(operator, session_id, "control:task_update")]
        return updates[-1] if updates and updates[-1]["status"] == ending else None

    update = wait_for(announced, timeout=30, what=f"the {ending} task update")
    assert not update["delivered"] and not task_results(operator, session_id)


def delivered_once(operator: Api, session_id: int) -> dict[str, Any]:
    def delivered() -> list[dict[str, Any]] | None:
        return task_results(operator, session_id) or None

    (result,) = wait_for(delivered, timeout=120, what="the retried delivery")
    events = operator.events(session_id)
    assert sum(1 for e in events if e["kind"] == "tool_result" and e["payload"]["name"] == "task_completed") == 1
    assert sum(1 for e in events if e["kind"] == "control:task_update" and e["payload"]["delivered"]) == 1
    assert len({e["exchange"] for e in events if e["exchange"]}) == 2  # the first turn and the one delivery
    return result


def test_a_failed_async_task_reaches_its_parent_once_when_the_delivering_worker_is_killed(
    launch_stack: Launch, fake_provider: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = fake_provider.profile_env(tmp_path_factory.mktemp("secrets"))
    var_dir = tmp_path_factory.mktemp("var")
    fake_provider.script.clear()
    fake_provider.default = models(lambda request: StatusResponse(400, {"error": {"message": "model refused"}}))
    try:
        first = launch_stack({**env, "SKALD_FAILPOINTS": "delegation.before_delivery"}, var_dir=var_dir)
        wait_ready(first)
        operator = first.api("operator")
        session_id, _ = start_task(first, operator)
        killed_while_delivering(first, operator, session_id, "failed")
        first.stop()

        second = launch_stack(env, var_dir=var_dir)  # no failpoint: the boot sweep retries the delivery
        operator = second.api("operator")
        result = delivered_once(operator, session_id)
        resumed = operator.wait_settled(session_id, result["exchange"], timeout=90)
    finally:
        fake_provider.default = None

    assert "failed" in result["payload"]["content"]  # prose the model reads, with the partial output
    assert resumed["request_key"].endswith(":run:1:delivery") and resumed["outcome"] == "completed"
    replies = [e for e in events_of(operator, session_id, "assistant") if e["exchange"] == result["exchange"]]
    assert replies and "noted:" in replies[-1]["payload"]["content"]  # the parent read the failure and went on


def test_a_cancelled_async_task_reaches_its_parent_once_when_the_delivering_worker_is_killed(
    launch_stack: Launch, fake_provider: FakeOpenAIServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = fake_provider.profile_env(tmp_path_factory.mktemp("secrets"))
    var_dir = tmp_path_factory.mktemp("var")
    in_flight, release = threading.Event(), threading.Event()

    def hold(request: RecordedRequest) -> Response:
        in_flight.set()  # the task agent's provider call is in flight until the task is cancelled
        release.wait(60)
        return sse(text_chunks("too late"))

    fake_provider.script.clear()
    fake_provider.default = models(hold)
    try:
        first = launch_stack({**env, "SKALD_FAILPOINTS": "delegation.before_delivery"}, var_dir=var_dir)
        wait_ready(first)
        operator = first.api("operator")
        session_id, _ = start_task(first, operator)
        assert in_flight.wait(90), "the task agent's provider call never arrived"
        (update, *_) = [e["payload"] for e in events_of(operator, session_id, "control:task_update")]
        cancelled = operator.client.post(f"/api/web/tasks/{update['job']}/cancel")
        assert cancelled.status_code == 202, cancelled.text
        killed_while_delivering(first, operator, session_id, "cancelled")
        first.stop()

        second = launch_stack(env, var_dir=var_dir)
        operator = second.api("operator")
        result = delivered_once(operator, session_id)
        settled = operator.wait_settled(session_id, result["exchange"], timeout=60)
    finally:
        release.set()
        fake_provider.default = None

    assert "cancelled" in result["payload"]["content"]
    assert settled["outcome"] == "canceled"  # a cancellation is recorded, not answered by a model
    assert not [e for e in events_of(operator, session_id, "assistant") if e["exchange"] == result["exchange"]
                and e["payload"].get("turn", 0) > 0]
