"""Browser fixtures: the real stack (``python -m skald.launcher``, see ``tests/e2e/stack.py``) and
Debian's headless Chromium driven through Selenium, with a small admin vocabulary for the tests.

Chromium is never optional: a missing browser fails the test (``.ci/run`` installs it), and the
driver is given explicitly so Selenium Manager never downloads one. Screenshots are kept under
``test-artifacts/browser/`` after the run.
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.stack import BASE_DIR, PASSWORD, Stack, launch

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = BASE_DIR / "test-artifacts" / "browser"
WAIT = 30.0  # a hang guard for one page or one element (a loaded CI core renders slowly); never a time assertion
MAX_SHOT_HEIGHT = 4000  # full-page screenshots, capped


def _require_chromium() -> None:
    missing = [str(path) for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return
    where = "CI=true: .ci/run should have installed them" if os.environ.get("CI", "").lower() in {"1", "true", "yes"} \
        else "install them with `apt-get install chromium chromium-driver` (or run .ci/run)"
    pytest.fail(f"the browser tests need Debian's Chromium and ChromeDriver; missing {', '.join(missing)} — {where}",
                pytrace=False)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One running stack for the module, stopped with SIGTERM (the stop asserts nothing is left)."""
    running = launch(tmp_path_factory.mktemp("var"))
    yield running
    if not running.stopped:
        running.stop()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """``test-artifacts/browser/``, emptied of the previous run's screenshots and kept afterwards."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink(missing_ok=True)  # another xdist worker may have removed it first
    return ARTIFACTS


def chromium_options(profile: Path, *extra_flags: str) -> webdriver.ChromeOptions:
    """Headless Chromium with a throw-away profile; ``extra_flags`` for a test's own needs."""
    _require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1400,900", f"--user-data-dir={profile}",
                 *extra_flags):
        options.add_argument(flag)
    return options


@pytest.fixture(scope="module")
def module_chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    """One Chromium per module (its tests run in order on one worker): a launch costs seconds of CPU."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    driver = webdriver.Chrome(options=chromium_options(profile), service=Service(str(CHROMEDRIVER)))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture
def chromium(module_chromium: webdriver.Chrome, stack: Stack) -> webdriver.Chrome:
    """The module's Chromium as a first visit finds it: no cookies, no storage for the stack's origin,
    a blank page, 1,400 x 900."""
    driver = module_chromium
    driver.get("about:blank")
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": stack.base_url, "storageTypes": "all"})
    driver.set_window_size(1400, 900)
    return driver


class Admin:
    """The Django admin as a person at the browser sees it: log in, click, fill, read, screenshot."""

    def __init__(self, driver: webdriver.Chrome, stack: Stack, artifacts: Path) -> None:
        self.driver = driver
        self.stack = stack
        self.artifacts = artifacts
        self.shots: list[Path] = []

    # -- navigation

    def open(self, path: str) -> None:
        self.driver.get(self.stack.base_url + path)

    def login(self, username: str) -> None:
        self.open("/admin/login/?next=/admin/")
        self.fill("#id_username", username)
        self.fill("#id_password", PASSWORD)
        self.click("#login-form input[type=submit]")
        self.wait_text("#user-tools", username, what=f"{username} to be logged in")

    def logout(self) -> None:
        self.click("#logout-form button[type=submit]")
        self.wait_text("#content", "Log in again", what="the logged-out page")

    def click(self, locator: str) -> None:
        """Click the element ``locator`` names: CSS, or XPath when it starts with ``//``. Live panels
        swap their markup while they refresh, so a click that lands on a swapped-out element finds
        the element again and clicks the new one."""
        by = By.XPATH if locator.startswith("//") else By.CSS_SELECTOR

        def clicked(driver: webdriver.Chrome) -> bool:
            element = EC.element_to_be_clickable((by, locator))(driver)
            if not element:
                return False
            element.click()
            return True

        WebDriverWait(self.driver, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
            clicked, f"no clickable {locator} on {self.driver.current_url}")

    def click_link(self, text: str) -> None:
        WebDriverWait(self.driver, WAIT).until(EC.element_to_be_clickable((By.LINK_TEXT, text))).click()

    def fill(self, css: str, text: str) -> None:
        field = self.find(css)
        field.clear()
        field.send_keys(text)

    # -- reading

    def find(self, css: str) -> WebElement:
        return WebDriverWait(self.driver, WAIT).until(EC.visibility_of_element_located((By.CSS_SELECTOR, css)),
                                                      f"no visible {css} on {self.driver.current_url}")

    def text(self, css: str) -> str:
        """The visible text of the first visible ``css``, read again if a live swap replaced it."""

        def read(driver: webdriver.Chrome) -> str | bool:
            element = EC.visibility_of_element_located((By.CSS_SELECTOR, css))(driver)
            return element.text if element else False

        return WebDriverWait(self.driver, WAIT, ignored_exceptions=[StaleElementReferenceException]).until(
            read, f"no visible {css} on {self.driver.current_url}")

    def texts(self, css: str) -> list[str]:
        """The text of every element ``css`` matches, read in one script: a live panel swapping its
        markup meanwhile cannot hand back an element that is gone."""
        return list(self.driver.execute_script(
            "return Array.from(document.querySelectorAll(arguments[0]), element => element.innerText)", css))

    def wait_text(self, css: str, text: str, *, what: str = "", timeout: float = WAIT) -> None:
        """Wait until ``css`` shows ``text`` (case-insensitive: the admin upper-cases some labels).
        ``timeout`` is a hang guard, never an assertion: work a worker drives gets a longer one."""

        def shown(driver: webdriver.Chrome) -> bool:
            return any(text.lower() in element.text.lower() for element in driver.find_elements(By.CSS_SELECTOR, css))

        try:
            WebDriverWait(self.driver, timeout, ignored_exceptions=[StaleElementReferenceException]).until(
                shown, f"waiting for {what or repr(text)} in {css} on {self.driver.current_url}")
        except TimeoutException:
            self.screenshot("timed-out")  # what the page showed instead, kept with the run's artifacts
            raise

    def reload_until(self, check: Callable[[], Any], *, timeout: float, what: str) -> Any:
        """Reload the page until ``check()`` is truthy (a polling operator's F5), at most ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = check()
            except (StaleElementReferenceException, WebDriverException):
                found = None
            if found:
                return found
            if time.monotonic() > deadline:
                self.screenshot("timed-out")
                raise AssertionError(f"timed out after {timeout} s waiting for {what} on {self.driver.current_url}")
            time.sleep(0.3)
            self.driver.refresh()

    # -- artifacts

    def screenshot(self, step: str) -> Path:
        """A full-page PNG, numbered in the order taken: ``test-artifacts/browser/NN-step.png``."""
        self.driver.execute_script("window.scrollTo(0, 0)")  # the sticky sidebar follows the scroll position
        metrics = self.driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
        size = metrics["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], MAX_SHOT_HEIGHT), "scale": 1}
        shot = self.driver.execute_cdp_cmd("Page.captureScreenshot",
                                           {"format": "png", "captureBeyondViewport": True, "clip": clip})
        # Numbered across the session, so every test's shots sort in the order they were taken.
        path = self.artifacts / f"{len(list(self.artifacts.glob('*.png'))) + 1:02d}-{step}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        self.shots.append(path)
        return path


@pytest.fixture
def admin(chromium: webdriver.Chrome, stack: Stack, artifacts: Path) -> Admin:
    return Admin(chromium, stack, artifacts)
