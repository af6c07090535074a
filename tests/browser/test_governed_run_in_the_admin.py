"""A governed run, followed in headless Chromium against the real stack (daphne + a qcluster).

With the demo's users: the operator launches a GDL run on the demo case, the approver answers the
parked ``write_file`` after reading its diff, the reviewer accepts the run's proposal, and the next
run's first step (``search_knowledge``) finds what was accepted. Every step leaves a screenshot in
``test-artifacts/browser/``.
"""

from __future__ import annotations

import re

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from skald.demo import DEMO_CASE_TITLE
from skald.models import RunStatus
from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("governed-run-in-the-admin")]

RUN_TIMEOUT = 30.0
FIRST_TICKET = "Checkout returns 502 since the 09:10 deploy; customers cannot pay."
SECOND_TICKET = "Checkout returns 502 again after today's deploy?"
PROPOSAL_TITLE = f"Finding: {FIRST_TICKET}"  # the demo playbook's title names the ticket it answered


def launch_run(admin: Admin, ticket: str, first_shot: str) -> int:
    """Home → all cases → tick the demo case → "Launch GDL run" → the ticket → Launch; returns the run's id."""
    admin.open("/admin/")
    admin.click_link("All cases →")  # from the operator's home panel
    admin.wait_text("#result_list", DEMO_CASE_TITLE)
    row_of(admin, DEMO_CASE_TITLE).find_element(By.CSS_SELECTOR, "input.action-select").click()
    Select(admin.find("select[name=action]")).select_by_visible_text("Launch GDL run")
    admin.screenshot(f"{first_shot}-case-selected")
    admin.click("button[name=index]")
    admin.wait_text("#content h1", "Launch a GDL run")
    admin.fill("#id_ticket", ticket)
    admin.screenshot(f"{first_shot}-ticket")
    admin.click("#launch-gdl")
    admin.wait_text(".messagelist", "Launched run #", what="the launch confirmation")
    match = re.search(r"/admin/skald/run/(\d+)/change/", admin.driver.current_url)
    assert match, f"the launch did not land on the run's page: {admin.driver.current_url}"
    return int(match.group(1))


def row_of(admin: Admin, text: str) -> WebElement:
    """The changelist row with a cell that reads ``text``."""
    return admin.driver.find_element(By.XPATH, f"//table[@id='result_list']//tr[td[normalize-space()='{text}']]")


def run_status(admin: Admin) -> str:
    """The run page's status, as its pill reads ("Waiting for an approver")."""
    return admin.text("#run-status").strip()


def search_result_row(admin: Admin) -> str | None:
    """The timeline's ``search_knowledge`` tool result, once there is one."""
    return next((row for row in admin.texts("#timeline > li") if "tool search_knowledge" in row), None)


def api_run_status(stack: Stack, run_id: int) -> str:
    with stack.http(stack.token("operator")) as client:
        response: httpx.Response = client.get(f"/api/runs/{run_id}/")
    assert response.status_code == 200, response.text
    return str(response.json()["status"])


def test_it_follows_a_governed_run_from_launch_to_reused_knowledge(admin: Admin, stack: Stack) -> None:
    # The operator launches a run; it parks at the gated write.
    admin.login("operator")
    admin.screenshot("operator-home")
    run_id = launch_run(admin, FIRST_TICKET, "launch")
    admin.reload_until(lambda: run_status(admin) == "Waiting for an approver", timeout=RUN_TIMEOUT,
                       what="the run to park for approval")
    first_search = search_result_row(admin)
    assert first_search and "No accepted knowledge matches." in first_search  # nothing accepted yet
    assert "write_file" in admin.text("#run-approvals")
    admin.screenshot("run-awaiting-approval")
    # The frame tree follows the timeline's live feed (issue 35): it is part of the live region,
    # below the timeline, and already shows the sub-agent frame the run opened.
    assert admin.driver.execute_script(
        "return document.querySelector('#run-live #frame-tree h2').getBoundingClientRect().top"
        " >= document.querySelector('#timeline').getBoundingClientRect().bottom")
    assert "depth 1" in admin.text("#frame-tree")
    admin.logout()

    # The approver reads the diff of reports/findings.md and approves it with a reason.
    admin.login("approver")
    admin.click_link("Open the queue →")  # the approver's home panel
    admin.wait_text("#result_list", "write_file")
    admin.screenshot("pending-approvals")
    admin.click("//table[@id='result_list']//a[text()='write_file']")
    diff = admin.text("pre.skald-diff")
    assert "+++ b/reports/findings.md" in diff, diff
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert "+# Findings" in added and f"+{FIRST_TICKET}" in added, diff
    admin.fill("#resolve-form #id_reason", "Only writes the report under reports/; fine.")
    admin.screenshot("approval-diff")
    admin.click("#resolve-form input[name=_approve]")
    admin.wait_text(".messagelist", "Approved write_file (reports/findings.md)", what="the approval confirmation")
    admin.screenshot("approved")
    wait_for(lambda: api_run_status(stack, run_id) == RunStatus.COMPLETED, timeout=RUN_TIMEOUT, interval=0.3,
             what=f"run {run_id} to complete after the approval")
    admin.logout()

    # The reviewer accepts the run's proposal; it becomes knowledge.
    admin.login("reviewer")
    admin.click_link("Open the review queue →")  # the reviewer's home panel, pending first
    admin.wait_text("#result_list", PROPOSAL_TITLE)
    admin.screenshot("pending-proposals")
    row_of(admin, PROPOSAL_TITLE).find_element(By.CSS_SELECTOR, "th a").click()  # the id links to the page
    admin.wait_text(".field-status", "pending")
    admin.screenshot("proposal")
    admin.click("//ul[contains(@class,'object-tools')]//button[text()='Accept…']")
    admin.wait_text("#content h1", "Accept 1 proposal")
    admin.screenshot("accept-confirmation")
    admin.click("input[name=apply]")
    admin.wait_text(".messagelist", "Accepted “Finding: ", what="the acceptance confirmation")
    admin.click_link("Knowledge entries")
    admin.wait_text("#result_list", PROPOSAL_TITLE)
    admin.screenshot("knowledge-entries")
    admin.logout()

    # The operator sees the first run completed, then a second run's search finds the new knowledge.
    admin.login("operator")
    admin.open(f"/admin/skald/run/{run_id}/change/")
    assert run_status(admin) == RunStatus.COMPLETED.label
    assert "accepted" in admin.text("#run-proposals").lower()
    admin.screenshot("first-run-completed")
    second_id = launch_run(admin, SECOND_TICKET, "relaunch")
    assert second_id != run_id
    found = admin.reload_until(lambda: search_result_row(admin), timeout=RUN_TIMEOUT,
                               what="the second run's knowledge search")
    assert "accepted knowledge entries match" in found and PROPOSAL_TITLE in found, found
    admin.screenshot("second-run-finds-knowledge")


def test_an_admin_sees_the_calls_a_looser_rule_would_have_let_through_and_confirms(admin: Admin, stack: Stack) -> None:
    """Issue 32: the rule page previews an edit's impact on the calls recorded above (both runs parked
    their write for a human), and a looser gate saves only once the admin confirms it."""
    with stack.http(stack.token("admin")) as client:
        rules = client.get("/api/policy/rules/")
    assert rules.status_code == 200, rules.text
    [rule] = [r for r in rules.json() if r["tool_pattern"] == "write_file" and r["group"] is None]
    assert rule["action"] == "require"

    admin.login("admin")
    admin.open(f"/admin/approvals/approvalrule/{rule['id']}/change/")
    assert admin.find("#rule-impact").get_attribute("data-state") == "idle"
    Select(admin.find("#id_action")).select_by_value("allow")  # the live preview answers before any save
    admin.wait_text("#rule-impact[data-state=loosens]", "would have let", what="the live impact preview")
    preview = admin.text("#rule-impact")
    match = re.search(r"This change would have let (\d+) calls? from 1 user run with less restriction in the last "
                      r"7 days \((\d+) approval → allowed\)", preview)
    assert match and int(match[1]) >= 2 and match[1] == match[2], preview  # both runs' writes
    admin.screenshot("rule-impact-preview")
    with stack.http(stack.token("admin")) as client:  # nothing saved yet
        assert client.get(f"/api/policy/rules/{rule['id']}/").json()["action"] == "require"

    admin.click("input[name=_save]")  # a looser gate asks for a confirmation first
    admin.wait_text("ul.errorlist.nonfield", "Tick 'Confirm a looser gate'", what="the confirmation request")
    admin.screenshot("rule-asks-to-confirm")
    assert Select(admin.find("#id_action")).first_selected_option.get_attribute("value") == "allow"
    admin.click("#id_confirm_loosening")
    admin.click("input[name=_save]")
    admin.wait_text(".messagelist", "Impact on recorded calls:", what="the saved rule's impact message")
    admin.screenshot("rule-saved-with-impact")
    with stack.http(stack.token("admin")) as client:
        assert client.get(f"/api/policy/rules/{rule['id']}/").json()["action"] == "allow"
