"""Live on a session's last page follows the steps it shows, not only their count
(headless Chromium, QA155 #1): a long call stored after a shorter one that began after it
(a session's concurrent calls) shows each step once, in index order, and a session deleted
and begun again under its id shows its new steps, not the deleted ones."""
from __future__ import annotations

import httpx
import pytest

from agents_trace.records import StepResult
from tests.agents_trace.browser import chromium_fixture, connect, page_fixture, wait_for  # noqa: F401 (fixtures)
from tests.agents_trace.helpers import ManualClock, make_tracer, served_viewer
from tests.agents_trace.test_viewer_page import KEYS

LIVE_WAIT_S = 10   # Live asks every 2 s (browser.LIVE_TICK_MS here): a few rounds


def shown_steps(driver) -> list[list[str]]:
    """Each step row's [#, request id] as the steps table shows them, top to bottom."""
    return driver.execute_script("return [...document.querySelectorAll('#steps tr.step-row')].map("
                                 "r => [r.dataset.step, r.cells[0].getAttribute('data-request') || ''])")


class Steps:
    """Steps of session "conc" (tenant acme) begun and ended one at a time, as the
    gateway's concurrent calls are, each flushed to the store when it ends."""

    def __init__(self, tracer, clock: ManualClock) -> None:
        self.tracer, self.clock, self.made = tracer, clock, 0

    def begin(self):
        self.made += 1
        request_id = f"chatcmpl-conc-{self.made}"
        ctx = self.tracer.begin("acme", {"x-session-id": "conc"},
                                {"model": "tiny", "messages": [{"role": "user", "content": f"call {self.made}"}]},
                                request_id=request_id)
        self.clock.advance(0.2)
        return ctx, request_id

    def end(self, begun, num_output_tokens: int = 1) -> None:
        ctx, request_id = begun
        self.tracer.end(ctx, StepResult(num_input_tokens=7, num_output_tokens=num_output_tokens, ttft_s=0.05,
                                        worker="w0", finish_reason="stop", output_text="ok", response_id=request_id))
        self.clock.advance(0.5)
        assert self.tracer.flush(5.0)


def open_live(driver, base_url: str, rows: int) -> None:
    from selenium.webdriver.common.by import By
    connect(driver, base_url, "k-acme")
    driver.get(f"{base_url}/ui#/session/acme/conc")
    wait_for(driver, lambda d: len(shown_steps(d)) == rows)
    driver.find_element(By.ID, "live").click()


@pytest.fixture
def conc(tmp_path):
    """(its `Steps`, the viewer's base URL): session "conc" with step #0 stored."""
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    steps = Steps(tracer, clock)
    steps.end(steps.begin())
    with served_viewer(tracer, KEYS) as base_url:
        yield steps, base_url


def test_live_shows_a_step_stored_after_a_later_one_once_each_in_index_order(conc, driver):
    """Step 1 (a long call) begins before step 2 and ends after it: Live showed #2 twice
    and never #1 (it asked for the steps after the count shown, and #2 moved there)."""
    from selenium.webdriver.common.by import By

    steps, base_url = conc
    open_live(driver, base_url, 1)
    long_call, short_call = steps.begin(), steps.begin()
    steps.end(short_call)   # stored first: #2 shows after #0 while #1 runs
    wait_for(driver, lambda d: [n for n, _ in shown_steps(d)] == ["0", "2"], timeout_s=LIVE_WAIT_S)
    steps.end(long_call, num_output_tokens=600)
    wait_for(driver, lambda d: len(shown_steps(d)) == 3 and "3 steps" in
             d.find_element(By.ID, "session-summary").text, timeout_s=LIVE_WAIT_S)
    assert shown_steps(driver) == [["0", "chatcmpl-conc-1"], ["1", "chatcmpl-conc-2"],
                                   ["2", "chatcmpl-conc-3"]]
    steps.end(steps.begin())   # and Live goes on after them
    wait_for(driver, lambda d: len(shown_steps(d)) == 4, timeout_s=LIVE_WAIT_S)
    assert [n for n, _ in shown_steps(driver)] == ["0", "1", "2", "3"]


def test_live_shows_a_session_deleted_and_begun_again_under_its_id(conc, driver):
    """The session is deleted while Live is on and a new step comes under its id: its
    count is 1 again, and Live kept showing the deleted session's step."""
    steps, base_url = conc
    open_live(driver, base_url, 1)
    assert shown_steps(driver)[0][1] == "chatcmpl-conc-1"
    assert httpx.delete(f"{base_url}/v1/traces/sessions/conc",
                        headers={"authorization": "Bearer k-acme"}).status_code == 200
    steps.end(steps.begin())
    wait_for(driver, lambda d: [r for _, r in shown_steps(d)] == ["chatcmpl-conc-2"], timeout_s=LIVE_WAIT_S)
