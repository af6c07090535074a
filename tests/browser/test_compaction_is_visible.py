"""Compaction, seen by an operator in headless Chromium against the real stack: a GDL run whose
window crosses a (deliberately tiny) threshold shows each compaction in the admin run timeline —
what it covered, the summary, the probe score — and the console shows the marker inline."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from skald.demo import DEMO_CASE_TITLE
from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch

pytestmark = [pytest.mark.browser, pytest.mark.e2e]

RUN_TIMEOUT = 30.0
TICKET = "Checkout returns 502 since the 09:10 deploy; TimeoutError in /srv/checkout/pool.py, ticket OPS-4412."
# The playbook's messages are small: these numbers make the run compact at each of its first turns.
TINY = {"threshold_tokens": 40, "keep_tokens": 30, "summary_max_tokens": 200}


@pytest.fixture(scope="module")
def compacting_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = launch(tmp_path_factory.mktemp("var"), {"SKALD_COMPACTION": json.dumps(TINY)})
    yield running
    if not running.stopped:
        running.stop()


def test_the_admin_timeline_and_the_console_show_each_compaction(chromium, compacting_stack: Stack,
                                                                  artifacts: Path) -> None:
    shots = artifacts / "compaction"
    shots.mkdir(exist_ok=True)
    admin = Admin(chromium, compacting_stack, shots)
    admin.login("operator")
    admin.click_link("Cases")
    admin.wait_text("#result_list", DEMO_CASE_TITLE)
    admin.driver.find_element(
        By.XPATH, f"//table[@id='result_list']//tr[td[normalize-space()='{DEMO_CASE_TITLE}']]//input").click()
    Select(admin.find("select[name=action]")).select_by_visible_text("Launch GDL run")
    admin.click("button[name=index]")
    admin.fill("#id_ticket", TICKET)
    admin.click("#launch-gdl")
    admin.wait_text(".messagelist", "Launched run #", what="the launch confirmation")
    run_id = int(re.search(r"/admin/skald/run/(\d+)/change/", admin.driver.current_url).group(1))

    # The run parks at its gated write; by then its window has been compacted.
    def compaction_entries():
        entries = admin.driver.find_elements(By.CSS_SELECTOR, ".skald-timeline [data-compaction=compaction]")
        probes = admin.driver.find_elements(By.CSS_SELECTOR, ".skald-timeline [data-compaction=probe]")
        return (entries, probes) if entries and probes else None

    entries, probes = admin.reload_until(compaction_entries, timeout=RUN_TIMEOUT, what="a compaction in the timeline")
    first = entries[0].text
    assert "Compaction #1" in first and "covered seq 1\u2013" in first and "verbatim tail from seq" in first
    assert "Summary of the earlier conversation" in first and "OPS-4412" in first  # the ticket's intent kept
    assert re.search(r"Probe score: \d+‰ lost", probes[0].text)
    admin.screenshot("run-timeline-compaction")

    # The console: the run's session shows the compaction marker inline, with its probe score.
    admin.open("/console/")
    admin.wait_text("#sessions", "", what="the session list")
    admin.driver.find_element(By.CSS_SELECTOR, "#sessions li").click()
    admin.wait_text("#events", "Compacted seq", what="the compaction marker")
    marker = admin.find("#events li.compaction .compaction-marker")
    assert "verbatim from seq" in marker.text
    admin.wait_text("#events", "probe:", what="the probe score beside the marker")
    admin.screenshot("console-compaction-marker")
    assert run_id > 0
