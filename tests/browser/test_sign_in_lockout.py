"""Brute-force protection on the real stack (issue 17): 20 wrong passwords — half at the token
endpoint, half at the console's login form — lock the account at both entrances, the right password
included; an administrator (signed in beforehand) lifts the lock in the admin in headless Chromium."""

from __future__ import annotations

import re

import httpx
import pytest
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import Admin
from tests.e2e.stack import PASSWORD, Stack

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("sign-in-lockout")]


def console_login(stack: Stack, password: str) -> httpx.Response:
    """The console's login form as a browser posts it (CSRF cookie and token included)."""
    with httpx.Client(base_url=stack.base_url, timeout=10.0) as client:
        page = client.get("/admin/login/", params={"next": "/console/"})
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token, page.text[:500]
        return client.post("/admin/login/?next=/console/", data={
            "csrfmiddlewaretoken": token.group(1), "username": "operator", "password": password, "next": "/console/"})


def token_login(stack: Stack, password: str) -> httpx.Response:
    with stack.http() as client:
        return client.post("/api/auth/token/", json={"username": "operator", "password": password})


def test_twenty_wrong_passwords_lock_both_entrances_until_an_admin_lifts_it(admin: Admin, stack: Stack) -> None:
    admin.login("admin")  # the administrator's session predates the lock of this address
    for attempt in range(10):
        assert token_login(stack, f"guess-{attempt}").status_code == 401
    for attempt in range(9):
        page = console_login(stack, f"guess-{attempt}")
        assert page.status_code == 200 and "Please enter the correct username and password" in page.text
    last = console_login(stack, "guess-last")
    assert last.status_code == 429 and "Sign-in locked" in last.text

    assert token_login(stack, PASSWORD).status_code == 429
    refused = console_login(stack, PASSWORD)
    assert refused.status_code == 429 and "Sign-in locked" in refused.text

    admin.open("/admin/axes/accessattempt/?q=operator")
    admin.wait_text("#result_list", "operator", what="the operator's failed attempts")
    admin.screenshot("lockout-attempts")
    admin.click("#action-toggle")
    Select(admin.find("select[name=action]")).select_by_value("lift_lockout")
    admin.click("button[name=index]")
    admin.wait_text(".messagelist", "Lifted", what="the lockout lifted")

    assert token_login(stack, PASSWORD).status_code == 200
    assert console_login(stack, PASSWORD).status_code == 302
