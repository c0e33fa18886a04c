"""A token budget holds across restarts: the budgeted tenants' spent tokens are kept in a file."""
from __future__ import annotations

import json

import httpx
import pytest

from gateway.config import LimitsConfig, key_digest, parse_config
from gateway.limits import Limiters
from gateway.spent_tokens import FORMAT, SpentTokens

from tests.gateway.conftest import KEYS


def test_counts_round_trip_and_a_tenant_left_out_keeps_its_entry(tmp_path):
    path = tmp_path / "spent.json"
    assert not SpentTokens(path).save({})                # no budgeted tenant: no file
    assert not path.exists()
    spent = SpentTokens(path)
    assert spent.save({"a": 10, "b": 5})
    assert json.loads(path.read_text()) == {"format": FORMAT, "tenants": {"a": 10, "b": 5}}
    assert not spent.save({"a": 10})                     # nothing changed: not written again
    assert spent.save({"a": 12})                         # b, not given (removed, budget lifted), stays
    assert SpentTokens.load(path).counts == {"a": 12, "b": 5}
    assert SpentTokens.load(tmp_path / "absent.json").counts == {}


@pytest.mark.parametrize("text", ["not json", '{"format": "other", "tenants": {}}', '[1, 2]',
                                  f'{{"format": "{FORMAT}", "tenants": {{"a": -3}}}}',
                                  f'{{"format": "{FORMAT}", "tenants": {{"a": 1.5}}}}'])
def test_a_file_that_cannot_be_read_is_set_aside_and_the_counts_start_at_zero(tmp_path, text, caplog):
    path = tmp_path / "spent.json"
    path.write_text(text)
    with caplog.at_level("WARNING"):
        assert SpentTokens.load(path).counts == {}
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("spent.json.damaged-")]
    assert aside.read_text() == text and not path.exists()   # kept for a person to look at, never deleted
    assert "the tenants' spent tokens" in caplog.text


def test_limiters_resume_spent_tokens_for_tenants_now_and_those_a_reload_adds():
    limiters = Limiters({"a": LimitsConfig(token_budget=100), "b": LimitsConfig()})
    limiters.restore_spent({"a": 60, "c": 40})
    assert limiters["a"].num_spent_tokens == 60 and limiters["b"].num_spent_tokens == 0
    limiters.update({"a": LimitsConfig(token_budget=100), "c": LimitsConfig(token_budget=50)})   # c added
    assert limiters["c"].num_spent_tokens == 40
    assert limiters.spent_by_budgeted_tenant() == {"a": 60, "c": 40}   # b: no budget, not kept


def test_a_spent_budget_stays_spent_after_a_restart(tmp_path, monkeypatch):
    from gateway.app import build_app
    from tests.gateway.serving import start_server

    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(tmp_path / "spent.json"))
    config = parse_config({
        "models": [{"name": "mock", "kind": "upstream", "litellm_model": "openai/gpt-4o-mini",
                    "litellm_params": {"mock_response": "Hello from the mock upstream"}}],
        "tenants": [{"name": "alpha", "api_key_sha256": [key_digest(KEYS["alpha"])],
                     "limits": {"token_budget": 60}}]})
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}
    headers = {"Authorization": f"Bearer {KEYS['alpha']}"}

    def served_statuses(num_requests: int) -> list[int]:
        server = start_server(build_app(config))
        try:
            return [httpx.post(f"{server.base_url}/v1/chat/completions", json=body, headers=headers,
                               timeout=30).status_code for _ in range(num_requests)]
        finally:
            server.stop()   # the last save

    first = served_statuses(8)
    assert first[0] == 200 and first[-1] == 429         # the budget ran out in the first process
    spent = json.loads((tmp_path / "spent.json").read_text())["tenants"]["alpha"]
    assert spent > 0
    assert served_statuses(1) == [429]                  # and stays spent in the next
