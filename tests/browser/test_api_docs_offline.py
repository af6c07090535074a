"""API docs that work offline (issue 13): Swagger UI and Redoc are served by the project
(drf-spectacular-sidecar), so a browser that can reach nothing but loopback renders every operation.

Chromium gets a dead proxy for everything but loopback and a resolver that knows no names; its
network log must then show no request that left 127.0.0.1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from skald.core.api.schema import TAGS
from tests.browser.conftest import CHROMEDRIVER, chromium_options
from tests.e2e.stack import Stack

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("api-docs-offline")]
WAIT = 120.0  # a hang guard: the bundles are megabytes, and parsing them on a loaded CI core takes a while
OFFLINE_FLAGS = (
    "--proxy-server=http://127.0.0.1:9",  # nothing listens on the discard port; loopback bypasses proxies
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)


@pytest.fixture
def offline_chromium(tmp_path: Path) -> Iterator[webdriver.Chrome]:
    options = chromium_options(tmp_path / "profile", *OFFLINE_FLAGS)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def requested_urls(driver: webdriver.Chrome) -> list[str]:
    """Every URL the page asked the network for, from Chromium's DevTools log."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def operation_summaries(stack: Stack) -> list[str]:
    schema: dict[str, Any] = httpx.get(f"{stack.base_url}/api/schema/", params={"format": "json"}).json()
    return [op["summary"] for item in schema["paths"].values() for method, op in item.items()
            if method in {"get", "post", "put", "patch", "delete"}]


def wait_for_count(driver: webdriver.Chrome, css: str, count: int) -> list[Any]:
    WebDriverWait(driver, WAIT).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, css)) >= count,
                                      f"fewer than {count} {css} on {driver.current_url}")
    return driver.find_elements(By.CSS_SELECTOR, css)


def assert_stayed_on_loopback(driver: webdriver.Chrome, stack: Stack, *, bundle: str) -> None:
    """No network request left the project (Chromium's own ``chrome://`` pages are not network)."""
    urls = [url for url in requested_urls(driver) if url.startswith(("http:", "https:", "ws:", "wss:"))]
    assert any(url.startswith(f"{stack.base_url}{bundle}") for url in urls), urls  # the project's own bundle
    outside = [url for url in urls if not url.startswith(stack.base_url + "/")]
    assert not outside, f"the docs asked for something outside the project: {outside}"


def test_swagger_ui_renders_every_operation_with_nothing_but_loopback(offline_chromium, stack, artifacts):
    summaries = operation_summaries(stack)
    offline_chromium.get(f"{stack.base_url}/api/docs/")
    blocks = wait_for_count(offline_chromium, ".opblock", len(summaries))
    assert len(blocks) == len(summaries)
    shown = {element.text for element in offline_chromium.find_elements(By.CSS_SELECTOR,
                                                                        ".opblock-summary-description")}
    assert shown == set(summaries)
    tags = {element.get_attribute("data-tag") for element in offline_chromium.find_elements(By.CSS_SELECTOR,
                                                                                           ".opblock-tag")}
    assert tags == TAGS
    assert "How to authenticate" in offline_chromium.find_element(By.CSS_SELECTOR, ".info").text
    # Issue 35: the Authorize dialog offers the JWT scheme first (a token pasted into the cookie's failed).
    offline_chromium.find_element(By.CSS_SELECTOR, ".btn.authorize").click()
    schemes = wait_for_count(offline_chromium, ".auth-container h4", 2)
    assert schemes[0].text.startswith("jwtAuth"), [scheme.text for scheme in schemes]
    offline_chromium.find_element(By.CSS_SELECTOR, ".btn-done, .close-modal").click()
    offline_chromium.save_screenshot(str(artifacts / "api-docs-swagger-offline.png"))
    assert_stayed_on_loopback(offline_chromium, stack,
                              bundle="/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle")


def test_redoc_renders_every_operation_with_nothing_but_loopback(offline_chromium, stack, artifacts):
    summaries = operation_summaries(stack)
    offline_chromium.get(f"{stack.base_url}/api/redoc/")
    wait_for_count(offline_chromium, "[data-section-id^='operation/']", len(summaries))
    headings = {element.text for element in offline_chromium.find_elements(
        By.CSS_SELECTOR, "[data-section-id^='operation/'] h2")}
    assert set(summaries) <= headings
    offline_chromium.save_screenshot(str(artifacts / "api-docs-redoc-offline.png"))
    # Redoc's bundle as published renders an attribution image from cdn.redoc.ly; the copy the page
    # loads names an inline image instead, so not even a request is attempted (issue 35).
    assert_stayed_on_loopback(offline_chromium, stack, bundle="/assets/redoc.standalone.js")
