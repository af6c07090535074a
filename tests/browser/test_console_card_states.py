"""The console's approval card when an answer is refused and when its exchange is stopped (issue 13:
"errors next to the card, resolved and cancelled states"), in headless Chromium on the real stack.
A rejection without a reason is refused on the card (and by the service behind it: issue 35).

The stack runs with four eyes on, so an approver who asks for a gated write in their own session
may not approve it: the refusal shows on the card, which stays answerable. Stopping the session
then cancels the parked call: the card says so and offers no buttons.

The session list beside the cards follows the admin live socket: it keeps its elements while
nothing changed, and a session started elsewhere appears by itself, swapped in at once, never
showing an empty list meanwhile.

The controls follow the session access rule (issue 35): an operator's session waiting for an approver
says so in the list; the approver who opens it reads it without a message box; an auditor gets no New
session and no Send, and a sentence saying why.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from skald.demo import DEMO_CASE_TITLE
from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("console-card-states")]

WORKER_WAIT = 90.0  # a hang guard for steps a qcluster worker drives, not a time assertion

# Wraps the page's fetch: the answer to POST …/stop/ is handed to the console only once the status
# line has said the exchange stopped (which comes over the websocket); window.stopAnswered says the
# console has handled it. window.statusSaid keeps every status the line showed from then on: the
# stop also ends the session's async log check, whose delivery may move the line on at once.
HOLD_STOP_ANSWER = """
const status = document.getElementById("status");
window.statusSaid = [];
new MutationObserver(() => { window.statusSaid.push(status.textContent); })
  .observe(status, {childList: true, characterData: true, subtree: true});
const stoppedShown = () => window.statusSaid.some((text) => text.endsWith(" · Stopped"));
const plain = window.fetch;
window.fetch = async (...args) => {
  const answer = await plain(...args);
  if (!String(args[0]).endsWith("/stop/")) return answer;
  await new Promise((done) => {
    const tick = setInterval(() => {
      if (stoppedShown()) {
        clearInterval(tick); done();
      }
    }, 20);
  });
  // The console reads the body, then sets its status in the same chain of microtasks: a timer
  // started once the body is read fires after that.
  const read = answer.json.bind(answer);
  answer.json = async () => {
    const body = await read();
    setTimeout(() => { window.stopAnswered = true; }, 0);
    return body;
  };
  return answer;
};
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = launch(tmp_path_factory.mktemp("var"), {"SKALD_FOUR_EYES": "1"})
    yield running
    if not running.stopped:
        running.stop()


def test_a_refused_answer_shows_on_the_card_and_a_stop_cancels_it(admin: Admin, stack: Stack) -> None:
    admin.login("approver")
    admin.open("/console/")
    admin.click("#new-session")
    admin.wait_text("#status", "Session #", what="a new session to open")
    # No case was chosen: said above the message box before the first message (read_logs would fail).
    assert "tools that read a case's logs (read_logs) will fail" in admin.text("#no-case")
    admin.fill("#message", "Why does checkout return 502?")
    admin.click("#composer button[type=submit]")
    admin.wait_text("#events .card", "Approval needed: write_file", what="the card from the worker",
                    timeout=WORKER_WAIT)

    card = admin.find("#events .card")
    # Said before anyone decides: the approver asked for this call themselves (issue 35).
    assert admin.text("#events .card .own") == "You started this session: another approver must decide (four eyes)."
    card.find_element(By.CSS_SELECTOR, "button.reject").click()  # no reason typed (issue 35)
    admin.wait_text("#events .card .error", "A reason is required to reject.", what="the card to ask for a reason")
    card = admin.find("#events .card")
    assert "waiting" in card.get_attribute("class")
    assert all(button.is_enabled() for button in card.find_elements(By.CSS_SELECTOR, "button"))
    card.find_element(By.CSS_SELECTOR, "input").send_keys("My own report; fine.")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    admin.wait_text("#events .card .error", "four_eyes_required", what="the refusal next to the card")
    assert "requester cannot approve their own call" in admin.text("#events .card .error")
    card = admin.find("#events .card")
    assert "waiting" in card.get_attribute("class")  # still open: another approver may answer it
    assert all(button.is_enabled() for button in card.find_elements(By.CSS_SELECTOR, "button"))
    admin.driver.execute_script("arguments[0].scrollIntoView()", card)
    admin.screenshot("console-card-refused")

    # The stop settles the parked exchange inside the request, so its end can reach the socket
    # before the stop's own answer reaches the page. Hold that answer until the end is shown, so
    # the order is the racy one every time: the answer must not turn the status back.
    admin.driver.execute_script(HOLD_STOP_ANSWER)
    admin.click("#stop")
    admin.wait_text("#events .card .state", "Cancelled", what="the card to turn cancelled", timeout=WORKER_WAIT)
    card = admin.find("#events .card")
    assert "cancelled" in card.get_attribute("class") and "waiting" not in card.get_attribute("class")
    assert not card.find_elements(By.CSS_SELECTOR, "button")  # nothing left to answer
    assert not card.find_element(By.CSS_SELECTOR, ".error").text  # the earlier refusal no longer applies
    WebDriverWait(admin.driver, WORKER_WAIT).until(lambda d: d.execute_script("return window.stopAnswered"),
                                                   "the status to say Stopped, then the stop's answer to arrive")
    said = admin.driver.execute_script("return window.statusSaid")
    assert any(text.endswith(" · Stopped") for text in said), said
    assert not any("Stopping" in text for text in said), said  # the late answer did not turn it back
    # The stop as a sentence, not its payload ({"reason": "stop requested"}); no reply was streaming.
    # (The stop cancels the session's async log check too, whose ending may follow as its own row.)
    assert admin.texts("#events li.ev-canceled .tool")[0] == "Stopped: stop requested."
    admin.driver.execute_script("arguments[0].scrollIntoView()", card)
    admin.screenshot("console-card-cancelled")


# Counts the console's session-list loads as they finish, and watches the list for changes: how
# many times its children were replaced, and whether it was ever seen empty.
WATCH_SESSION_LIST = """
window.listLoads = 0;
const plain = window.fetch;
window.fetch = async (...args) => {
  const answer = await plain(...args);
  if (String(args[0]) !== "/api/sessions/" || (args[1] && args[1].method)) return answer;
  // The list is built in the microtasks after this body is read: a timer started then fires after.
  const read = answer.json.bind(answer);
  answer.json = async () => {
    const body = await read();
    setTimeout(() => { window.listLoads += 1; }, 0);
    return body;
  };
  return answer;
};
window.listSwaps = 0; window.listSeenEmpty = false;
new MutationObserver(() => {
  window.listSwaps += 1;
  if (!document.querySelector("#sessions li")) window.listSeenEmpty = true;
}).observe(document.getElementById("sessions"), {childList: true});
document.querySelector("#sessions li").skaldMark = "kept";
"""


def reload_list(admin: Admin) -> None:
    """Have the console load its session list now (as it does when its tab is shown again) and
    wait until that load has finished."""
    loads = admin.driver.execute_script("return window.listLoads")
    admin.driver.execute_script("document.dispatchEvent(new Event('visibilitychange'))")
    WebDriverWait(admin.driver, 30).until(lambda d: d.execute_script("return window.listLoads") > loads,
                                          "the session list to load again")


def test_the_session_list_follows_new_sessions_live_and_never_flickers_empty(admin: Admin,
                                                                                   stack: Stack) -> None:
    admin.login("approver")
    admin.open("/console/")
    admin.click("#new-session")
    admin.wait_text("#status", "Session #", what="the new session to open")
    opened = admin.text("#status").removeprefix("Session ")
    # The page's first load may still be on its way with the list as it was before; it is dropped.
    admin.wait_text("#sessions", f"{opened} ", what="the new session in the list")
    admin.driver.execute_script(WATCH_SESSION_LIST)

    reload_list(admin)  # nothing changed: the same elements stay (a hovered item is not replaced)
    assert admin.driver.execute_script("return window.listSwaps") == 0
    assert admin.driver.execute_script("return document.querySelector('#sessions li').skaldMark") == "kept"

    # The list follows the live socket (and does not poll meanwhile): a session started elsewhere
    # appears by itself, swapped in one step, never shown empty.
    admin.wait_text("#sessions-live", "live", what="the list to follow the live socket")
    with stack.http(stack.token("approver")) as client:
        created = client.post("/api/sessions/", json={})
    assert created.status_code == 201, created.text
    admin.wait_text("#sessions", f"#{created.json()['id']} ", what="the session made through the API")
    assert admin.driver.execute_script("return [window.listSwaps, window.listSeenEmpty]") == [1, False]


def shown(admin: Admin, css: str) -> bool:
    return any(element.is_displayed() for element in admin.driver.find_elements(By.CSS_SELECTOR, css))


def test_each_role_gets_the_controls_it_may_use_and_sees_who_a_session_waits_for(admin: Admin,
                                                                                  stack: Stack) -> None:
    admin.login("operator")
    admin.open("/console/")
    Select(admin.find("#new-case")).select_by_visible_text(DEMO_CASE_TITLE)
    admin.click("#new-session")
    admin.wait_text("#status", "Session #", what="a new session to open")
    assert not shown(admin, "#no-case")  # attached to the case: read_logs has its logs
    admin.fill("#message", "Why does checkout return 502?")
    admin.click("#composer button[type=submit]")
    admin.wait_text("#events .card", "Waiting for an approver.", what="the operator's waiting card",
                    timeout=WORKER_WAIT)
    admin.wait_text("#sessions li.current .badge", "waiting for an approver", what="the badge in the list")
    admin.screenshot("console-operator-waiting-badge")
    admin.open("/admin/")
    admin.logout()

    # The approver may converse in their own sessions, not write into the operator's: reading it
    # to decide on its card, they get no message box and a line saying whose it is.
    admin.login("approver")
    admin.open("/console/")
    admin.click("//ul[@id='sessions']/li[span[text()='approval waiting']]")
    admin.wait_text("#events .card", "Approval needed: write_file")
    # Injection provenance (issue 30): the log analyst read the case's logs (untrusted), so the write
    # follows untrusted content; the banner names the source and sits above the arguments.
    admin.wait_text("#events .card .provenance", "Follows untrusted content.", what="the provenance banner")
    assert "From execute_task" in admin.text("#events .card .provenance")
    order = admin.driver.execute_script(
        "return [...document.querySelector('#events .card').children].map((c) => c.tagName + '.' + c.className)")
    assert order.index("DIV.provenance") < order.index("PRE.")
    assert admin.text("#not-yours") == ("You can read this session; only the user who started it sends "
                                        "messages to it.")
    assert not shown(admin, "#message") and not shown(admin, "#composer button[type=submit]")
    assert not shown(admin, "#stop") and not shown(admin, "#no-case")
    admin.screenshot("console-approver-reads-an-operators-session")
    admin.open("/admin/")
    admin.logout()

    admin.login("auditor")
    admin.open("/console/")
    assert admin.text("#read-only") == ("You can read sessions; starting one or sending a message needs the "
                                        "operator, approver, reviewer or workflow role.")
    controls = "#new-session, #message, #composer button[type=submit], #stop"
    assert not admin.driver.find_elements(By.CSS_SELECTOR, controls)  # none to use, none to hide
    admin.wait_text("#sessions", "waiting for an approver", what="the auditor's list to show the waiting session")
    admin.screenshot("console-auditor-reads")
