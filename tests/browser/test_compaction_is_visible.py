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

from tests.browser.conftest import Admin
from tests.browser.test_governed_run_in_the_admin import launch_run
from tests.e2e.stack import Stack, launch

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("compaction-is-visible")]

RUN_TIMEOUT = 90.0  # a hang guard for worker-driven steps on a loaded machine, never a time assertion
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
    run_id = launch_run(admin, TICKET, "compaction-launch")

    # The run parks at its gated write; by then its window has been compacted. The texts are read in
    # the probe (reload_until retries a stale one): the live timeline may swap its elements out
    # between a find and a read.
    def compaction_entries():
        entries = admin.driver.find_elements(By.CSS_SELECTOR, "#timeline [data-compaction=compaction]")
        probes = admin.driver.find_elements(By.CSS_SELECTOR, "#timeline [data-compaction=probe]")
        return ([e.text for e in entries], [p.text for p in probes]) if entries and probes else None

    entries, probes = admin.reload_until(compaction_entries, timeout=RUN_TIMEOUT, what="a compaction in the timeline")
    first = entries[0]
    assert "Compaction #1" in first and re.search(r"covered seq \d+\u2013\d+", first)
    assert "verbatim tail from seq" in first
    assert "Summary of the earlier conversation" in first and "OPS-4412" in first  # the ticket's intent kept
    assert re.search(r"Probe score: \d+‰ lost", probes[0])
    admin.screenshot("run-timeline-compaction")
    # Issue 35: the run page links to its compactions (in-page, for every reader of the run).
    link = admin.find("#run-compactions a[href^='#seq-']")
    target = link.get_attribute("href").split("#", 1)[1]
    assert admin.driver.find_elements(By.CSS_SELECTOR, f"#{target} [data-compaction=compaction]")

    # The console: the run's session shows the compaction marker inline, with its probe score.
    admin.open("/console/")
    admin.wait_text("#sessions", "GDL", what="the run's session in the session list")
    # The run's own session, by name: the async task it started may be listed above it by now.
    admin.click("//*[@id='sessions']//li[contains(., 'GDL:')]")
    admin.wait_text("#events", "Compacted seq", what="the compaction marker")
    marker = admin.find("#events li.compaction .compaction-marker")
    assert "verbatim from seq" in marker.text
    admin.wait_text("#events", "probe:", what="the probe score beside the marker")
    admin.screenshot("console-compaction-marker")
    assert run_id > 0
