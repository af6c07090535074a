"""Single sign-on in headless Chromium against the real stack (issue 17): a local administrator maps
provider groups to roles in the admin; a provider user signs in to the console and, after the
provider moves them to another group, to the admin with the new role. The provider is a real
OpenID Connect provider (authlib) serving over loopback from this test process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.browser.conftest import Admin
from tests.e2e.stack import Stack, launch
from tests.skald.identity.provider import CLIENT_ID, CLIENT_SECRET, Provider

pytestmark = [pytest.mark.browser, pytest.mark.e2e, pytest.mark.xdist_group("sso")]


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    running = Provider().start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def stack(provider: Provider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    running = launch(tmp_path_factory.mktemp("var"), {
        "SKALD_OIDC_ISSUER": provider.issuer, "SKALD_OIDC_CLIENT_ID": CLIENT_ID,
        "SKALD_OIDC_CLIENT_SECRET": CLIENT_SECRET, "SKALD_OIDC_PROVIDER_NAME": "Test IdP",
        "SKALD_OIDC_ALLOW_CIDRS": "127.0.0.0/8"})
    provider.client.redirect_uris.append(f"{running.base_url}/oidc/callback/")
    yield running
    if not running.stopped:
        running.stop()


def add_mapping(admin: Admin, provider_group: str, role: str) -> None:
    admin.open("/admin/skald/providergroupmapping/add/")
    admin.fill("#id_provider_group", provider_group)
    Select(admin.find("#id_role")).select_by_value(role)
    admin.click("input[name=_save]")
    admin.wait_text("#result_list", provider_group, what="the saved mapping in the list")


def sso_sign_in(admin: Admin, start: str, username: str) -> None:
    admin.open(start)  # not signed in: the login page, with the provider's button
    admin.wait_text("#sso-sign-in", "Sign in with Test IdP", what="the single sign-on button")
    admin.click("#sso-sign-in")
    admin.fill("#idp-username", username)  # the provider's own sign-in page
    admin.click("#idp-sign-in")


def test_a_provider_user_signs_in_to_the_console_and_then_the_admin_with_roles_that_follow_the_provider(
        admin: Admin, provider: Provider, stack: Stack, artifacts: Path) -> None:
    admin.login("admin")  # the local break-glass administrator edits the mapping
    add_mapping(admin, "sre", "operator")
    add_mapping(admin, "change-board", "approver")
    admin.screenshot("sso-mapping")
    admin.logout()

    provider.person("olga", "sre")
    sso_sign_in(admin, "/console/", "olga")
    admin.wait_text(".who", "olga · operator", what="the console signed in as olga, an operator")
    assert admin.driver.current_url == f"{stack.base_url}/console/"
    admin.screenshot("sso-console")

    provider.people["olga"].groups = ["change-board"]
    admin.open("/admin/")
    admin.logout()
    sso_sign_in(admin, "/admin/", "olga")
    admin.wait_text("#user-tools", "olga", what="the admin signed in as olga")
    admin.open("/console/")
    admin.wait_text(".who", "olga · approver", what="olga now an approver, no longer an operator")
    admin.screenshot("sso-admin-next-sign-in")
    assert not admin.driver.find_elements(By.CSS_SELECTOR, "#sso-failed")
