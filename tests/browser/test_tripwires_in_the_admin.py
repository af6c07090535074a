"""Credential tripwires in the admin, in headless Chromium against the real stack: the operator of
the policy reads the active rule set, adds an organisation pattern, and tests a text against it."""

from __future__ import annotations

import pytest

from tests.browser.conftest import Admin
from tests.loop.tripwire_corpus import fakes

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("tripwires-in-the-admin")]

PATTERNS = "/admin/approvals/tripwirepattern/"


def test_an_admin_reads_the_rule_set_adds_a_pattern_and_tests_a_text(admin: Admin) -> None:
    stripe = next(f.snippet for f in fakes() if f.kind == "stripe-access-token")
    admin.login("admin")

    admin.open(PATTERNS)
    admin.click(".object-tools a[href$='tripwirepattern/rules/']")  # "Active rule set"
    admin.wait_text("#tripwire-rules", "github-pat", what="the vendored rules")
    admin.wait_text("#content", "gitleaks v8.30.1")
    admin.screenshot("tripwires-rule-set")

    admin.open(PATTERNS + "add/")
    admin.fill("#id_name", "acme-key")
    admin.fill("#id_regex", r"ACME-[0-9A-F]{24}")
    admin.fill("#id_keywords", "acme-")
    admin.click("input[name=_save]")
    admin.wait_text(".messagelist", "was added successfully")

    admin.open(PATTERNS)
    admin.click(".object-tools a[href$='tripwirepattern/test/']")  # "Test a text"
    admin.fill("#id_text", f"deploy with {stripe} and ACME-7F3A9C2E5B1D4F60A8B7C6D5")
    admin.click("#tripwire-test input[type=submit]")
    admin.wait_text("#tripwire-result", "Refused: org:acme-key, stripe-access-token", what="the test result")
    admin.screenshot("tripwires-test-box")
