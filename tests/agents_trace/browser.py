"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium.

Nothing is installed or downloaded here: the test is skipped, with the reason, only when
the Debian binaries are missing (CI installs them with apt); selenium is a test extra.
A test that ends without failing also fails when the browser's console reported a
Content-Security-Policy violation (the viewer must work under its own policy) or a load
that failed of anything but the API (the page's files, its icon: no `/favicon.ico` 404).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", "--window-size=1600,1400")
PAGE_TIMEOUT_S = 20


def _chromedriver() -> str | None:
    for path in CHROMEDRIVER_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromedriver")


@contextlib.contextmanager
def chromium_driver() -> Iterator[object]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium chromium-driver")
    driver_path = _chromedriver()
    if driver_path is None:
        pytest.skip("chromedriver is missing: apt-get install chromium-driver")
    from selenium import webdriver   # a test dependency (pyproject [test]): never skipped
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # the console, for page_errors
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
        errors = page_errors(driver)
        assert not errors, f"the viewer broke its Content-Security-Policy or missed a file: {errors}"
    finally:
        driver.quit()


def page_errors(driver) -> list[str]:
    """The console messages since the last call that report a Content-Security-Policy
    violation (Chromium: "Refused to ..." or "Loading ... violates ... Content Security
    Policy") or a failed load ("URL - Failed to load resource: ...") of a URL outside
    `/v1/` (the API's 404s are answers the page shows, e.g. a session not found)."""
    def failed_load(message: str) -> bool:
        url, _, rest = message.partition(" - ")
        return rest.startswith("Failed to load resource") and "/v1/" not in url
    return [entry["message"] for entry in driver.get_log("browser")
            if "Content Security Policy" in entry["message"] or failed_load(entry["message"])]


def wait_for(driver, condition, timeout_s: float = PAGE_TIMEOUT_S):
    """`condition`'s first truthy value; an element not there yet, or replaced while it was
    read (the page re-rendered it), is looked for again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout_s, ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)
                         ).until(condition)


def connect(driver, base_url: str, api_key: str) -> None:
    """Open /ui and enter the key the way a person would."""
    from selenium.webdriver.common.by import By
    driver.get(f"{base_url}/ui")
    driver.find_element(By.ID, "api-key").send_keys(api_key)
    driver.find_element(By.ID, "connect").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "who").text.startswith("tenant"))
