"""The queues and the homes follow changes another process commits, without a reload (issue 13:
"the run page and the queues update as events commit").

A run launched through the API parks its write on a qcluster worker (a process other than the web
server's) and a resolved call completes there, capturing its proposal: the approver's home and
queue, the reviewer's home and queue, and the operator's run list show each change while open. The proof is a marker: a
value set on the page before the change is still there after it (a reload would have wiped it),
and the page's live socket is up with no polling timer behind it.
"""

from __future__ import annotations

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, wait_for

# One stack, tests in order: under pytest-xdist the module stays on one worker (--dist loadgroup).
pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("live-queues")]

WORKER_WAIT = 120.0  # a hang guard for steps a qcluster worker drives, not a time assertion
TICKETS = ["Checkout returns 502 after the 10:00 deploy.", "Checkout 502s again for EU customers after 11:00."]


def mark_page(admin: Admin, live: str, *, kept: str) -> None:
    """Wait for the page's live socket to join and for the re-read joining starts, then leave a
    marker only this page load carries. Nothing changed meanwhile, so the element ``kept`` (taken
    before) must still be the page's own: a re-read that finds no change replaces nothing."""
    before = admin.driver.find_element(By.CSS_SELECTOR, kept)
    WebDriverWait(admin.driver, WORKER_WAIT).until(
        EC.presence_of_element_located((By.CSS_SELECTOR, f"{live}.live-connected")),
        f"the live socket of {live} to join")
    WebDriverWait(admin.driver, WORKER_WAIT).until(
        lambda d: int(d.find_element(By.CSS_SELECTOR, live).get_attribute("data-live-reads") or 0) >= 1,
        f"the re-read of {live} on joining")
    assert before.is_displayed()  # raises StaleElementReferenceException had it been replaced
    admin.driver.execute_script("window.skaldNoReload = location.href")


def assert_same_page(admin: Admin, live: str) -> None:
    assert admin.driver.execute_script("return window.skaldNoReload") == admin.driver.current_url, "the page reloaded"
    node = admin.driver.find_element(By.CSS_SELECTOR, live)
    assert "live-connected" in node.get_attribute("class") and "live-polling" not in node.get_attribute("class")


def launch(stack: Stack, ticket: str) -> None:
    with stack.http(stack.token("operator")) as client:
        launched = client.post("/workflow/cases/1/gdl", json={"ticket": ticket})
    assert launched.status_code in (200, 201, 202), launched.text


def pending(stack: Stack) -> list[dict]:
    with stack.http(stack.token("approver")) as client:
        response = client.get("/api/approvals/", params={"status": "pending"})
    assert response.status_code == 200, response.text
    return sorted(response.json(), key=lambda a: a["tool_call_id"])


def approve_oldest(stack: Stack) -> None:
    oldest = wait_for(lambda: pending(stack), timeout=WORKER_WAIT, what="a parked call")[0]
    with stack.http(stack.token("approver")) as client:
        answer = client.post(f"/api/approvals/{oldest['request_id']}/resolve",
                             json={"decision": "approve", "reason": "Writes only the report."})
    assert answer.status_code == 202, answer.text


def rows(admin: Admin) -> list[str]:
    return admin.texts("#result_list tbody tr")


def wait_rows(admin: Admin, count: int, what: str) -> None:
    """Wait until the list shows ``count`` rows (a swap may replace them under the reader)."""
    WebDriverWait(admin.driver, WORKER_WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
        lambda d: len(rows(admin)) == count, f"waiting for {what} on {admin.driver.current_url}")


def test_the_approvers_home_and_queue_show_calls_a_worker_parks(admin: Admin, stack: Stack) -> None:
    admin.login("approver")
    admin.wait_text("#panel-approvals", "0 waiting")
    mark_page(admin, "#skald-home", kept="#panel-approvals a")
    launch(stack, TICKETS[0])  # the worker reads the logs, then parks write_file
    admin.wait_text("#panel-approvals", "1 waiting", what="the parked call on the home", timeout=WORKER_WAIT)
    assert "write_file" in admin.text("#panel-approvals")
    assert_same_page(admin, "#skald-home")
    admin.screenshot("live-approver-home")

    admin.open("/admin/approvals/pendingapproval/")
    admin.wait_text("#result_list", "write_file")
    assert len(rows(admin)) == 1
    mark_page(admin, "[data-live-page]", kept="#result_list tbody tr")
    launch(stack, TICKETS[1])
    wait_rows(admin, 2, "the second parked call")
    assert_same_page(admin, "[data-live-page]")
    # The swapped list is a working list: ticking a row arms Django's actions as on a fresh page.
    admin.click("#result_list tbody tr:first-child input.action-select")
    admin.wait_text(".action-counter", "1 of 2 selected")
    admin.screenshot("live-approver-queue")
    admin.logout()


def test_the_reviewers_home_and_queue_show_proposals_a_worker_captures(admin: Admin, stack: Stack) -> None:
    admin.login("reviewer")
    admin.wait_text("#panel-proposals", "0 pending")
    mark_page(admin, "#skald-home", kept="#panel-proposals a")
    approve_oldest(stack)  # the worker runs the write, the run completes, its proposal is captured
    admin.wait_text("#panel-proposals", "1 pending", what="the captured proposal on the home", timeout=WORKER_WAIT)
    assert "Finding: " in admin.text("#panel-proposals")
    assert_same_page(admin, "#skald-home")
    admin.screenshot("live-reviewer-home")

    admin.open("/admin/proposals/proposal/?status__exact=pending")
    admin.wait_text("#result_list", "Finding: ")
    assert len(rows(admin)) == 1
    mark_page(admin, "[data-live-page]", kept="#result_list tbody tr")
    approve_oldest(stack)
    wait_rows(admin, 2, "the second proposal")
    assert_same_page(admin, "[data-live-page]")
    admin.screenshot("live-reviewer-queue")
    admin.logout()


def test_the_run_list_shows_a_run_the_worker_parks(admin: Admin, stack: Stack) -> None:
    admin.login("operator")
    admin.open("/admin/skald/run/")
    admin.wait_text("#result_list", "Completed")
    assert "Waiting for a human" not in admin.text("#result_list")  # both earlier runs finished
    mark_page(admin, "[data-live-page]", kept="#result_list tbody tr")
    launch(stack, "Checkout 502s once more, now for every region.")
    admin.wait_text("#result_list", "Waiting for a human", what="the run the worker parked", timeout=WORKER_WAIT)
    assert len(rows(admin)) == 3
    assert_same_page(admin, "[data-live-page]")
    admin.screenshot("live-operator-run-list")
    admin.logout()
