"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium.

Nothing is installed or downloaded here: the test is skipped, with the reason, only when
the Debian binaries are missing (CI installs them with apt); selenium is a test extra.
A test that ends without failing also fails when the browser's console reported a
Content-Security-Policy violation: the viewer must work under its own policy.
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
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # the console, for csp_violations
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    try:
        yield driver
        violations = csp_violations(driver)
        assert not violations, f"the viewer broke its Content-Security-Policy: {violations}"
    finally:
        driver.quit()


def csp_violations(driver) -> list[str]:
    """The console messages since the last call that report a Content-Security-Policy
    violation (Chromium: "Refused to ... because it violates ... Content Security Policy")."""
    return [entry["message"] for entry in driver.get_log("browser")
            if "Content Security Policy" in entry["message"]]


def wait_for(driver, condition, timeout_s: float = PAGE_TIMEOUT_S):
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout_s).until(condition)


def connect(driver, base_url: str, api_key: str) -> None:
    """Open /ui and enter the key the way a person would."""
    from selenium.webdriver.common.by import By
    driver.get(f"{base_url}/ui")
    driver.find_element(By.ID, "api-key").send_keys(api_key)
    driver.find_element(By.ID, "connect").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "who").text.startswith("tenant"))
