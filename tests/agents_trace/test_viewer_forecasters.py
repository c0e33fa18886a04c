"""The forecasters' state (/v1/traces/forecasters) and its lines over the /ui list, in
headless Chromium: scoped to the key's tenant, paged for an admin; without forecasters, the
API says so. Split from test_viewer_page.py (its `served` store for the last)."""
from __future__ import annotations

import httpx
import pytest

from agents_trace.api import Viewer
from tests.agents_trace.browser import (blank_page, chromium_fixture, connect, page_fixture,  # noqa: F401 (fixtures)
                                        wait_for)
from tests.agents_trace.helpers import ManualClock, make_tracer, run_scripted_session, viewer_app
from tests.agents_trace.test_viewer_page import KEYS, served_fixture  # noqa: F401 (a fixture)
from tests.gateway.serving import start_server


@pytest.fixture
def served_with_forecasters(tmp_path):
    """The scripted session's store, and live forecasters that learned acme's return gaps
    (25 sessions of two text answers), have a fitted step model for globex, and one
    session of each of 21 more tenants (t00..t20): more than the viewer lists."""
    from agents_trace.predict.config import PredictorConfig
    from agents_trace.predict.predictor import Predictor
    from gateway.forecasting import ForecastRelay
    from tests.gateway.test_forecasting import feed_two_answer_sessions

    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    run_scripted_session(tracer, clock)
    assert tracer.flush(5.0)
    with Predictor(PredictorConfig(background_refits=False)) as predictor:
        relay = ForecastRelay(predictor, {})
        feed_two_answer_sessions(relay, range(25), tenant="acme")
        predictor.fit_sequences("globex", [["USER", "ASSISTANT_TEXT"]] * 12)
        for i in range(21):
            predictor.fit_sequences(f"t{i:02d}", [["USER", "ASSISTANT_TEXT"]])
        keys = {**KEYS, "k-admin": Viewer("ops", is_admin=True)}
        server = start_server(viewer_app(tracer, keys, forecasters=relay))
        yield server.base_url
        server.stop()
    tracer.stop()


def test_forecaster_status_is_scoped_to_the_tenant_and_shown_over_the_list(served_with_forecasters, driver):
    from selenium.webdriver.common.by import By
    base_url = served_with_forecasters

    def status(key: str, query: str = "") -> dict:
        response = httpx.get(f"{base_url}/v1/traces/forecasters{query}",
                             headers={"authorization": f"Bearer {key}"}, timeout=10)
        assert response.status_code == 200
        return response.json()

    acme = status("k-acme")
    assert acme["forecasting"] is True and [t["tenant"] for t in acme["data"]] == ["acme"]
    assert acme["data"][0]["return_gaps"]["confident"] is True
    assert status("k-acme", "?tenant=globex")["data"] == []          # another tenant's: none
    everyone = ["acme", "globex"] + [f"t{i:02d}" for i in range(21)]
    admin = status("k-admin")
    assert [t["tenant"] for t in admin["data"]] == everyone and admin["has_more"] is False
    assert (admin["num_tenants"], admin["offset"], admin["limit"]) == (23, 0, 50)
    pages = [status("k-admin", f"?limit=10&offset={offset}") for offset in (0, 10, 20)]
    assert [t["tenant"] for page in pages for t in page["data"]] == everyone
    assert [page["has_more"] for page in pages] == [True, True, False]
    assert (acme["num_tenants"], status("k-acme", "?tenant=globex")["num_tenants"]) == (1, 0)
    bad = httpx.get(f"{base_url}/v1/traces/forecasters?limit=0", headers={"authorization": "Bearer k-admin"},
                    timeout=10)
    assert bad.status_code == 400 and bad.json()["detail"]["param"] == "limit"   # OpenAI-shaped in the gateway
    globex = status("k-admin", "?tenant=globex")["data"]
    assert globex[0]["step_model"]["fitted"] is True and globex[0]["step_model"]["fit"]["sessions"] == 12
    nobody = status("k-admin", "?tenant=nobody")   # a name the forecasters never saw: nothing made up
    assert (nobody["data"], nobody["num_tenants"]) == ([], 0)
    assert httpx.get(f"{base_url}/v1/traces/forecasters", timeout=10).status_code == 401
    connect(driver, base_url, "k-acme")
    line = wait_for(driver, lambda d: d.find_element(By.ID, "forecasters").text)
    assert line.startswith("Forecasts for acme: step model not fitted yet: 0 of 8 sessions finished")
    assert "· return gaps confident (" in line and "globex" not in line
    blank_page(driver)   # an admin, in a browser as new, sees a page of tenants and how many more there are
    connect(driver, base_url, "k-admin")
    wait_for(driver, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#forecasters li")) == 21)
    lines = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#forecasters li")]
    assert lines[0].startswith("Forecasts for acme:") and lines[19].startswith("Forecasts for t17:")
    assert lines[20] == "and 3 more tenants: filter by tenant to see one"


def test_without_forecasters_the_status_says_so(served):
    base_url, _ = served
    response = httpx.get(f"{base_url}/v1/traces/forecasters", headers={"authorization": "Bearer k-acme"},
                         timeout=10)
    assert response.json() == {"forecasting": False, "data": []}
