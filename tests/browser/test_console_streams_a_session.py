"""The console page (O4) in headless Chromium against the real stack: a message streams over the
websocket from the worker, the gated write shows as an approval card with its diff, and approving
it from the card lets the run go on.

The status line says what is true (issue 35): "Waiting for an approver" while the card waits,
"Stopped" after a stop, "Done" when an exchange completes. The log speaks in words: the approval's
answer names the approver ("Approved by approver", never "user:3"), no ``control:*`` label shows.
Stop pressed while the final answer streams leaves no half-written draft: the draft goes, and the
log says the unfinished reply was discarded.

The playbook streams word by word (``SKALD_PLAYBOOK_WORD_PAUSE_MS``): slowed here so that a stop
pressed on the answer's first word lands while the answer is still streaming.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("console-streams-a-session")]

WORKER_WAIT = 90.0  # a hang guard for steps a qcluster worker drives, not a time assertion

# Keeps what the page showed the moment its status line first said "Stopped": the status and the
# draft area (a MutationObserver runs right after the event that changed the status was handled).
WATCH_FOR_STOPPED = """
window.stoppedSeen = null;
new MutationObserver(() => {
  const status = document.getElementById("status").textContent;
  if (window.stoppedSeen === null && status.endsWith(" · Stopped")) {
    window.stoppedSeen = {status, draft: document.getElementById("live").textContent};
  }
}).observe(document.getElementById("status"), {childList: true, characterData: true, subtree: true});
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = launch(tmp_path_factory.mktemp("var"), {"SKALD_PLAYBOOK_WORD_PAUSE_MS": "60"})
    yield running
    if not running.stopped:
        running.stop()


def test_the_console_streams_a_run_resolves_its_approval_from_the_card_and_stops_mid_answer(
    chromium: webdriver.Chrome, stack: Stack, artifacts: Path
):
    console_shots = artifacts / "console"
    console_shots.mkdir(exist_ok=True)
    page = Admin(chromium, stack, console_shots)
    page.login("approver")  # approvers may converse and answer their own session's approvals
    page.open("/console/")
    page.click("#new-session")
    page.wait_text("#status", "Session #", what="a new session to open")  # not the initial "Pick … a session."
    session = re.fullmatch(r"Session #(\d+)", page.text("#status"))
    assert session, page.text("#status")
    said = f"Session #{session[1]} · "
    page.fill("#message", "Checkout returns 502 after the deploy")
    page.click("#composer button[type=submit]")
    page.wait_text("#events", "Approval needed: write_file", what="the approval card from the worker",
                   timeout=WORKER_WAIT)
    card = page.find(".card")
    assert "+++ b/reports/findings.md" in card.text and "+# Findings" in card.text
    assert page.driver.find_elements(By.CSS_SELECTOR, ".card pre .add")  # added lines are marked
    # The status says who the run waits for, not "Sent; the agent is working".
    page.wait_text("#status", "Waiting for an approver", what="the status to say the run waits")
    assert page.text("#status") == said + "Waiting for an approver"
    # The async log check started before the write ends before the answer: its result is delivered
    # once the exchange ends, so the session goes on after the stop below (and then says "Done").
    page.wait_text("#tasks .task", "succeeded", what="the async log check to end", timeout=WORKER_WAIT)
    page.screenshot("approval-card")

    card.find_element(By.CSS_SELECTOR, "input").send_keys("looks right")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    page.wait_text(".card .state", "Approved by", what="the card to say who approved", timeout=WORKER_WAIT)
    # The approver by name, in the card and in the log's row; never the principal label "user:N".
    assert page.text(".card .state") == "Approved by approver — “looks right”"
    (row,) = page.texts("#events li.ev-control-approval_resolved")
    assert row.split("\n") == ["Approval answered", "Approved by approver — “looks right”"], row

    # The final answer streams as a draft; Stop on its first word.
    page.driver.execute_script(WATCH_FOR_STOPPED)
    draft = WebDriverWait(page.driver, WORKER_WAIT, poll_frequency=0.02).until(
        lambda d: d.execute_script("const t = document.getElementById('live').textContent;"
                                   "return t.startsWith('Diagnosis') ? t : null"),
        "the final answer to stream")
    page.click("#stop")
    stopped = WebDriverWait(page.driver, WORKER_WAIT).until(
        lambda d: d.execute_script("return window.stoppedSeen"), "the status line to say Stopped")
    assert stopped == {"status": said + "Stopped", "draft": ""}, (draft, stopped)  # the half answer is gone
    page.wait_text("#events li.ev-canceled", "Stopped: stop requested.", what="the stop in the log")
    assert page.texts("#events li.ev-canceled .tool") == [
        "Stopped: stop requested. The unfinished reply was discarded."]
    # The stopped answer was never stored: no row holds it.
    assert not [text for text in page.texts("#events li .assistant") if "Diagnosis written" in text]
    page.screenshot("stopped-mid-answer")

    # The async check's result reopens the session; its answer completes: the status says Done.
    page.wait_text("#status", "Done", what="the delivered async result to be answered", timeout=WORKER_WAIT)
    assert page.text("#status") == said + "Done"
    events = page.text("#events")
    assert "The async log check came back" in events
    # Words, not the kernel's labels or payloads ('{"reason": "stop requested"}').
    assert "control:" not in events and "user:" not in events and '{"reason"' not in events, events
    # The write's multi-line content reads as text, one argument per line, not as JSON with "\n".
    call = next(text for text in page.texts("#events li .assistant") if "→ write_file(" in text)
    assert '  path: "reports/findings.md"' in call and "  content:\n    # Findings" in call, call
    assert "\\n" not in call, call
    page.screenshot("completed")
