"""A token budget holds across restarts: the budgeted tenants' spent tokens are kept in a file."""
from __future__ import annotations

import json

import httpx
import pytest

from gateway.config import LimitsConfig, key_digest, parse_config
from gateway.limiters import Limiters
from gateway.spent_tokens import FORMAT, SpentTokens

from tests.gateway.conftest import KEYS


def test_counts_round_trip_and_a_tenant_left_out_keeps_its_entry(tmp_path):
    path = tmp_path / "spent.json"
    assert SpentTokens(path).sync({"x": 5}, set()) == {}        # no budgeted tenant: no file
    assert list(tmp_path.iterdir()) == []
    spent = SpentTokens(path)
    assert spent.sync({"a": 10, "b": 5, "x": 7}, {"a", "b"}) == {}
    assert json.loads(path.read_text()) == {"format": FORMAT, "tenants": {"a": 10, "b": 5}}
    written = path.stat().st_mtime_ns
    assert spent.sync({"a": 10, "b": 5}, {"a", "b"}) == {} and path.stat().st_mtime_ns == written   # unchanged
    assert spent.sync({"a": 12}, {"a"}) == {}                   # b, not budgeted now (removed, lifted), stays
    assert SpentTokens.load(path).counts == {"a": 12, "b": 5}
    assert SpentTokens.load(tmp_path / "absent.json").counts == {}


def test_gateways_sharing_the_file_add_their_spending_and_each_counts_the_others(tmp_path):
    """Two processes' limiters and files on one path, saving in turn: the file holds the
    sum, each limiter learns what the other spent, and nothing is counted twice."""
    path = tmp_path / "spent.json"
    budgets = {"a": LimitsConfig(token_budget=1000), "b": LimitsConfig(token_budget=1000)}
    first, second = Limiters(dict(budgets)), Limiters(dict(budgets))
    files = [SpentTokens.load(path), SpentTokens.load(path)]

    def save(limiters: Limiters, spent: SpentTokens) -> None:
        others = spent.sync(limiters.spent_by_tenant(), limiters.budgeted_tenants())
        limiters.add_spent(others, spent.counts)

    first["a"].num_spent_tokens += 100
    save(first, files[0])
    second["a"].num_spent_tokens += 30
    second["b"].num_spent_tokens += 7
    save(second, files[1])
    assert SpentTokens.load(path).counts == {"a": 130, "b": 7}
    assert second.spent_by_tenant() == {"a": 130, "b": 7}       # learnt first's 100
    first["a"].num_spent_tokens += 5
    save(first, files[0])
    assert first.spent_by_tenant() == {"a": 135, "b": 7}        # its own 105 and second's 37
    save(second, files[1])
    save(first, files[0])
    assert SpentTokens.load(path).counts == {"a": 135, "b": 7}  # saves with nothing new add nothing
    assert first.spent_by_tenant() == second.spent_by_tenant() == {"a": 135, "b": 7}
    # an entry lowered by hand (the budget given back) while both run
    path.write_text(json.dumps({"format": FORMAT, "tenants": {"a": 35, "b": 7}}))
    save(first, files[0])
    save(second, files[1])
    assert first.spent_by_tenant() == second.spent_by_tenant() == {"a": 35, "b": 7}
    path.write_text("not json")                                 # damaged while running: set aside,
    save(first, files[0])                                       # the counts kept and written anew
    assert first.spent_by_tenant() == {"a": 35, "b": 7} and SpentTokens.load(path).counts == {"a": 35, "b": 7}
    path.unlink()                                               # deleted: every budget given back
    save(second, files[1])
    assert second.spent_by_tenant() == {"a": 0, "b": 0}
    first.update({**budgets, "c": LimitsConfig(token_budget=10)})   # a reload adds c: it starts from the file
    assert first["c"].num_spent_tokens == 0


async def test_what_another_gateway_added_is_counted_on_the_event_loop(tmp_path, monkeypatch):
    import asyncio

    from gateway.spent_tokens import start_spent_tokens

    path = tmp_path / "spent.json"
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(path))
    path.write_text(json.dumps({"format": FORMAT, "tenants": {"a": 40}}))
    limiters = Limiters({"a": LimitsConfig(token_budget=100)})
    saves = start_spent_tokens(limiters, asyncio.get_running_loop())
    try:
        assert limiters["a"].num_spent_tokens == 40
        limiters["a"].num_spent_tokens += 10                     # spent here
        other = SpentTokens.load(path)
        assert other.sync({"a": 40 + 25}, {"a"}) == {}           # another gateway spent 25
        assert await asyncio.to_thread(saves.save_now)
        assert SpentTokens.load(path).counts == {"a": 75}
        await asyncio.sleep(0.05)                               # counted in on this (the loop's) thread
        assert limiters["a"].num_spent_tokens == 75
    finally:
        await asyncio.to_thread(saves.stop)
    assert SpentTokens.load(path).counts == {"a": 75}           # the last save added nothing twice


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
    assert limiters.budgeted_tenants() == {"a", "c"}   # b: no budget, not kept
    assert limiters.spent_by_tenant() == {"a": 60, "c": 40, "b": 0}


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
