"""The console page (O4) in headless Chromium against the real stack: a message streams over the
websocket from the worker, the gated write shows as an approval card with its diff, and approving
it from the card lets the run finish."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.browser.conftest import Admin
from tests.e2e.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("console-streams-a-session")]


def test_the_console_streams_a_run_and_resolves_its_approval_from_the_card(
    chromium: webdriver.Chrome, stack: Stack, artifacts: Path
):
    console_shots = artifacts / "console"
    console_shots.mkdir(exist_ok=True)
    page = Admin(chromium, stack, console_shots)
    page.login("approver")  # approvers may converse and answer their own session's approvals
    page.open("/console/")
    page.click("#new-session")
    page.wait_text("#status", "Session #", what="a new session to open")  # not the initial "Pick … a session."
    page.fill("#message", "Checkout returns 502 after the deploy")
    page.click("#composer button[type=submit]")
    page.wait_text("#events", "Approval needed: write_file", what="the approval card from the worker")
    card = page.find(".card")
    assert "+++ b/reports/findings.md" in card.text and "+# Findings" in card.text
    assert page.driver.find_elements(By.CSS_SELECTOR, ".card pre .add")  # added lines are marked
    page.screenshot("approval-card")
    card.find_element(By.CSS_SELECTOR, "input").send_keys("looks right")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    page.wait_text("#status", "exchange ended: completed", what="the run to finish after the approval")
    events = page.text("#events")
    assert "control:approval_resolved" in events and "Diagnosis written to reports/findings.md" in events
    # The write's multi-line content reads as text, one argument per line, not as JSON with "\n".
    call = next(text for text in page.texts("#events li .assistant") if "→ write_file(" in text)
    assert '  path: "reports/findings.md"' in call and "  content:\n    # Findings" in call, call
    assert "\\n" not in call, call
    page.screenshot("completed")
