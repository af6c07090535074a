"""The console with delegation (SPEC S1, S5, O4) in headless Chromium against the real stack: a
sync delegate's own turns show nested under its parent, and the task strip shows an async task
running, then its delivered result — live, without a reload.

The stack talks to a local HTTPS fake of an OpenAI-compatible provider; the async task's model call
is held until the strip has shown it running (an event, not a timing)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from skald.agents.seed import TROUBLESHOOTER_PROMPT
from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch, wait_ready
from tests.loop.providers.fake_openai_server import (
    FakeOpenAIServer,
    RecordedRequest,
    SSEResponse,
    sse,
    text_chunks,
    tool_call_chunks,
)

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("console-delegation")]

WORKER_WAIT = 90.0  # steps a qcluster worker drives: generous, the suite shares two cores with other stacks

RELEASE = threading.Event()
ASYNC_STARTED = threading.Event()


def _call(name: str, arguments: dict[str, str]) -> SSEResponse:
    return sse(tool_call_chunks([(f"call_{len(json.dumps(arguments))}", name, json.dumps(arguments))]))


def answer(request: RecordedRequest) -> SSEResponse:
    messages = request.body["messages"]
    task = next(m["content"] for m in messages if m["role"] == "user")
    if messages[0]["content"] == TROUBLESHOOTER_PROMPT:
        if any(c["function"]["name"] == "task_completed" for m in messages for c in m.get("tool_calls") or []):
            return sse(text_chunks("The background check is back: nothing new."))
        done = sum(1 for m in messages if m["role"] == "tool")
        if done == 0:
            return _call("execute_task", {"agent": "log-analyst", "task": "sync look at the logs"})
        if done == 1:
            return _call("execute_task", {"agent": "log-analyst", "task": "async look at the logs", "mode": "async"})
        return sse(text_chunks("Started a background check."))
    if task == "sync look at the logs":
        return sse(text_chunks("Sync analysis: the pool is exhausted."))
    ASYNC_STARTED.set()
    RELEASE.wait(60)  # the async task's model call waits until the strip showed it running
    return sse(text_chunks("Async analysis: nothing recurring."))


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with FakeOpenAIServer(host="127.0.0.1", default=answer) as fake:
        running = launch(tmp_path_factory.mktemp("var"), fake.profile_env(tmp_path_factory.mktemp("secrets")))
        wait_ready(running)
        try:
            yield running
        finally:
            RELEASE.set()
            if not running.stopped:
                running.stop()


def shows(page: Admin, css: str, text: str, what: str) -> None:
    """Wait (without reloading) until ``css`` shows ``text``; the worker drives what appears."""
    WebDriverWait(page.driver, WORKER_WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda driver: any(text in element.text for element in driver.find_elements(By.CSS_SELECTOR, css)),
        f"waiting for {what} in {css}")


def test_the_console_nests_a_child_turn_and_the_strip_follows_a_task_to_its_result(
    chromium: webdriver.Chrome, stack: Stack, artifacts: Path
):
    shots = artifacts / "console-delegation"
    shots.mkdir(exist_ok=True)
    page = Admin(chromium, stack, shots)
    page.login("operator")
    page.open("/console/")
    page.click("#new-session")
    page.wait_text("#status", "session", what="a new session to open")
    page.fill("#message", "Why does checkout return 502?")
    page.click("#composer button[type=submit]")

    # The sync delegate's own turns, nested under the call that opened it.
    shows(page, "#events li.nested", "Sync analysis: the pool is exhausted.", "the child's nested turn")
    shows(page, "#events", "subagent_result", "the parent's one subagent_result")
    # The child's answer reads once: the delegating call's result and the subagent_result point at it.
    shows(page, "#events", "returned its answer (above)", "the subagent_result pointing at the answer")
    assert page.text("#events").count("Sync analysis: the pool is exhausted.") == 1
    # The async task, running in the strip while its model call is held.
    shows(page, "#tasks .task", "log-analyst: running", "the running task in the strip")
    assert ASYNC_STARTED.wait(30)
    page.screenshot("task-running")
    url = page.driver.current_url
    RELEASE.set()
    # No reload: the strip and the conversation follow the task to its delivered result.
    shows(page, "#tasks .task", "delivered", "the delivered task in the strip")
    shows(page, "#events", "The background check is back", "the parent's resumed turn")
    assert page.driver.current_url == url
    assert "task_completed" in page.text("#events")
    page.screenshot("task-delivered")
