"""MCP in the admin, in headless Chromium against the real stack: an admin registers a stdio server
(the SDK test server, tests/skald/mcp/server_app.py), sees its tools with their pinned digests, lists
them again after the server changed a definition, and approves the quarantined one from its diff."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("mcp-in-the-admin")]

SERVERS = "/admin/skald/mcpserver/"
TOOLS = "/admin/skald/mcptool/"
SERVER_SCRIPT = str(Path(__file__).resolve().parents[1] / "skald" / "mcp" / "server_app.py")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """This module's stack admits the test interpreter as a stdio MCP program (the others admit none)."""
    running = launch(tmp_path_factory.mktemp("var"), {"SKALD_MCP_STDIO_ALLOWLIST": sys.executable})
    yield running
    if not running.stopped:
        running.stop()


def choose(admin: Admin, css: str, value: str) -> None:
    admin.driver.find_element(By.CSS_SELECTOR, f"{css} option[value='{value}']").click()


def test_an_admin_registers_a_server_and_approves_a_quarantined_definition(admin: Admin, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "state-file").write_text(str(state))
    variant = tmp_path / "variant"
    variant.write_text("")
    admin.login("admin")

    admin.open(SERVERS + "add/")
    admin.fill("#id_name", "tests")
    choose(admin, "#id_transport", "stdio")
    admin.fill("#id_argv", json.dumps([sys.executable, SERVER_SCRIPT]))
    admin.fill("#id_secret_env", json.dumps({"MCP_TEST_STATE": str(tmp_path / "state-file"),
                                             "MCP_TEST_VARIANT": str(variant)}))
    choose(admin, "#id_trust", "trusted")
    admin.fill("#id_agents", json.dumps(["*"]))
    admin.click("#id_enabled")
    admin.click("input[name=_save]")
    admin.wait_text(".messagelist", "was added successfully", timeout=60)
    admin.wait_text("#result_list", "connected", what="the server connected")

    admin.open(TOOLS + "?q=tests")
    admin.wait_text("#result_list", "mcp__tests__echo", what="its tools")
    admin.screenshot("mcp-tools")

    variant.write_text("Also mails your files out.")  # the server now lists another definition
    admin.open(SERVERS)
    admin.click("//tr[.//a[text()='tests']]//input[@name='_selected_action']")
    choose(admin, "select[name=action]", "refresh_listing")
    admin.click("button[name=index]")
    admin.wait_text(".messagelist", '"quarantined": ["echo"]', what="the listing's result", timeout=60)

    admin.open(TOOLS + "?status__exact=quarantined")
    admin.click_link("mcp__tests__echo")
    admin.wait_text(".field-definition_diff", "Also mails your files out.", what="the diff")
    admin.screenshot("mcp-quarantine-diff")

    admin.open(TOOLS + "?status__exact=quarantined")
    admin.click("//tr[.//a[text()='mcp__tests__echo']]//input[@name='_selected_action']")
    choose(admin, "select[name=action]", "approve_definition")
    admin.click("button[name=index]")
    admin.wait_text(".messagelist", "Approved the listed definition of mcp__tests__echo", what="the approval")
    admin.open(TOOLS + "?q=tests&status__exact=active")
    admin.wait_text("#result_list", "mcp__tests__echo", what="the approved tool active again")
