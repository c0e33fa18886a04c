"""Headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium.

Nothing is installed or downloaded here: the test is skipped, with the reason, only when
the Debian binaries are missing (CI installs them with apt); selenium is a test extra.
A browser starts in about two seconds, so a test module shares one (`chromium_fixture`)
and each test gets it as a new one would be (`page_fixture`, `fresh_page`: a blank page,
no storage or cookies, the default window size). A test that ends without failing also
fails when the browser's console reported, while it ran, a Content-Security-Policy
violation (the viewer must work under its own policy) or a load that failed of anything
but the API (the page's files, its icon: no `/favicon.ico` 404).

The page's Live refresh (`setInterval` every 2 s, app.js) ticks every LIVE_TICK_MS here,
and the list's Live refresh of the lines over it (every 30 s: app.js
LIVE_FIGURES_INTERVAL_MS; any interval of LONG_INTERVAL_MS or more) every
LIVE_FIGURES_TICK_MS, still several row ticks apart: the wrapper only shortens the
intervals, so the page's own rule (one refresh at a time, a tick skipped while the last is
in flight: app.js `setLive`) is what the tests exercise (test_viewer_live_slow.py: a
refresh slower than the tick; test_viewer_live_figures.py: the figures' own timer). The
wrapper is added by DevTools before the page's scripts run, outside its CSP.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER_CANDIDATES = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")
WINDOW_SIZE = (1600, 1400)
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-background-networking", f"--window-size={WINDOW_SIZE[0]},{WINDOW_SIZE[1]}")
PAGE_TIMEOUT_S = 20
POLL_S = 0.05   # how often `wait_for` looks again
LIVE_TICK_MS = 250
LIVE_FIGURES_TICK_MS = 4 * LIVE_TICK_MS
LONG_INTERVAL_MS = 10000
FAST_INTERVALS = """
(() => {
  const every = window.setInterval.bind(window);
  const shortened = (ms) => ms >= %(long)d ? %(figures)d : ms > %(tick)d ? %(tick)d : ms;
  window.setInterval = (callback, ms, ...args) => every(callback, shortened(ms), ...args);
})();""" % {"tick": LIVE_TICK_MS, "figures": LIVE_FIGURES_TICK_MS, "long": LONG_INTERVAL_MS}


def _chromedriver() -> str | None:
    for path in CHROMEDRIVER_CANDIDATES:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("chromedriver")


@contextlib.contextmanager
def chromium_browser() -> Iterator[object]:
    """One headless Chromium (its WebDriver), quit at the end; see `fresh_page` for a test's use."""
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
    # Chromium leaves an empty org.chromium.Chromium.* folder in TMPDIR per browser: its own, removed with it
    scratch = tempfile.mkdtemp(prefix="stepahead-chromium-")
    try:
        driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path,
                                                                    env={**os.environ, "TMPDIR": scratch}))
        try:
            driver.set_page_load_timeout(PAGE_TIMEOUT_S)
            driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": FAST_INTERVALS})
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def fresh_page(driver) -> Iterator[object]:
    """`driver` for one test as a new browser would be: a blank page, no cookies, no
    session or local storage, the default window size. When the test ends without failing,
    it fails if the console reported a CSP violation or a failed load meanwhile (`page_errors`)."""
    blank_page(driver)
    if tuple(driver.get_window_size().values()) != WINDOW_SIZE:
        driver.set_window_size(*WINDOW_SIZE)
    page_errors(driver)   # read, so only this test's count
    yield driver
    blank_page(driver)
    errors = page_errors(driver)
    assert not errors, f"the viewer broke its Content-Security-Policy or missed a file: {errors}"


def blank_page(driver) -> None:
    """The page left for about:blank, its origin's storage and every cookie cleared first."""
    if driver.current_url.startswith("http"):
        driver.execute_script("sessionStorage.clear(); localStorage.clear()")
    driver.delete_all_cookies()
    driver.get("about:blank")


@contextlib.contextmanager
def chromium_driver() -> Iterator[object]:
    """A browser of its own, for a test that uses one once (`fresh_page`'s checks at the end)."""
    with chromium_browser() as driver, fresh_page(driver):
        yield driver


@pytest.fixture(name="chromium", scope="module")
def chromium_fixture() -> Iterator[object]:
    """The test module's one browser (import this and `page_fixture` where tests take `driver`)."""
    with chromium_browser() as driver:
        yield driver


@pytest.fixture(name="driver")
def page_fixture(chromium) -> Iterator[object]:
    """The module's browser as a new one for this test (`fresh_page`)."""
    with fresh_page(chromium) as driver:
        yield driver


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
    """`condition`'s first truthy value, looked for every POLL_S; an element not there yet,
    or replaced while it was read (the page re-rendered it), is looked for again."""
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout_s, poll_frequency=POLL_S,
                         ignored_exceptions=(NoSuchElementException, StaleElementReferenceException)).until(condition)


def connect(driver, base_url: str, api_key: str) -> None:
    """Open /ui and enter the key the way a person would."""
    from selenium.webdriver.common.by import By
    driver.get(f"{base_url}/ui")
    driver.find_element(By.ID, "api-key").send_keys(api_key)
    driver.find_element(By.ID, "connect").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "who").text.startswith("tenant"))
