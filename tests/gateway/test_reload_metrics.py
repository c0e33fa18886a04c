"""`/metrics` tells the reloads (QA225 F5), on an admin's scrape only:
`stepahead_config_reloads_total{outcome}` counts each reload applied or refused, and
`stepahead_config_last_reload_success_timestamp_seconds` is the start's time until a
reload applies, then that reload's (as Prometheus' own
`prometheus_config_last_reload_success_timestamp_seconds`)."""
from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import key_digest, load_config
from gateway.reload import reload_tenants

MODEL = ('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
         'litellm_params = { mock_response = "hi" }\n')
RELOADS = "stepahead_config_reloads_total"
LAST_SUCCESS = "stepahead_config_last_reload_success_timestamp_seconds"


def _tenant(name: str, extra: str = "") -> str:
    return f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(f"sk-{name}")}"]\n{extra}'


def _reload_series(client: TestClient, key: str) -> dict[tuple[str, str], float]:
    """The reload families' samples an API key's scrape shows: (name, outcome) → value."""
    response = client.get("/metrics", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200
    return {(sample.name, sample.labels.get("outcome", "")): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples if sample.name in (RELOADS, LAST_SUCCESS)}


def test_a_good_and_a_bad_reload_move_the_admins_reload_series_and_a_tenant_sees_none(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("ops", "admin = true") + _tenant("a"))
    app = build_app(load_config(path), config_path=str(path))
    state = app.state.gateway
    began_s = time.time()
    with TestClient(app) as client:
        started = _reload_series(client, "sk-ops")
        start_s = started.pop((LAST_SUCCESS, ""))
        assert began_s <= start_s <= time.time()
        assert started == {(RELOADS, "applied"): 0, (RELOADS, "refused"): 0}
        assert _reload_series(client, "sk-a") == {}   # a tenant's key never sees them
        path.write_text(MODEL + _tenant("ops", "admin = true") + _tenant("a") + _tenant("b"))
        before_s = time.time()
        assert client.portal.call(reload_tenants, state, path) is not None
        applied = _reload_series(client, "sk-ops")
        assert applied[(RELOADS, "applied")] == 1 and applied[(RELOADS, "refused")] == 0
        assert before_s <= applied[(LAST_SUCCESS, "")] <= time.time()
        path.write_text("[[tenants]]\nname = ")   # does not load: refused, the running config kept
        assert client.portal.call(reload_tenants, state, path) is None
        refused = _reload_series(client, "sk-ops")
        assert refused == {**applied, (RELOADS, "refused"): 1}   # the last success's time stays
        assert _reload_series(client, "sk-b") == {}
    text = state.metrics.render()
    assert f"# TYPE {RELOADS} counter" in text and f"# TYPE {LAST_SUCCESS} gauge" in text
