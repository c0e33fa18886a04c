"""A `token_budget` counts from when it is set, at a reload as at a start (QA145): a
reload that gives a tenant a budget it did not have starts it from the spent-tokens file
(gateway/limiters.py, gateway/spent_tokens.py), never from what it spent without one."""
from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from gateway.config import LimitsConfig, key_digest, load_config
from gateway.errors import ApiError
from gateway.limiters import Limiters
from gateway.spent_tokens import FORMAT, SpentTokens

BUDGET = LimitsConfig(token_budget=1000)


async def _spend(limiters: Limiters, tenant: str, num_tokens: int) -> None:
    limiter = limiters[tenant]
    limiter.release(await limiter.acquire(num_tokens), num_tokens)


async def test_a_budget_a_reload_gives_starts_from_zero_not_from_what_was_spent_without_one():
    limiters = Limiters({"e": LimitsConfig()})
    limiters.restore_spent({})
    for _ in range(3):
        await _spend(limiters, "e", 100)
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 0   # as a start with this config would have it
    ticket = await limiters["e"].acquire(800)    # QA145: was a 429 insufficient_quota at once
    limiters["e"].release(ticket, 800)
    assert limiters["e"].num_spent_tokens == 800 and limiters.budget_room("e") == 200


async def test_a_budget_a_reload_gives_starts_from_the_files_count():
    limiters = Limiters({"e": LimitsConfig()})
    limiters.restore_spent({"e": 200})   # from a budget it had before
    assert limiters["e"].num_spent_tokens == 0   # no budget now: the file's count is not loaded
    await _spend(limiters, "e", 300)
    assert limiters["e"].num_spent_tokens == 300   # what it was charged here only
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 200
    with pytest.raises(ApiError) as refused:
        await limiters["e"].acquire(801)
    assert refused.value.code == "insufficient_quota"


async def test_a_tenant_a_reload_adds_counts_from_the_file_only_with_a_budget():
    limiters = Limiters({"a": BUDGET})
    limiters.restore_spent({"a": 10, "b": 40, "c": 70})
    limiters.update({"a": BUDGET, "b": LimitsConfig(), "c": BUDGET})
    assert [limiters[name].num_spent_tokens for name in "abc"] == [10, 0, 70]
    await _spend(limiters, "b", 5)
    limiters.update({"a": BUDGET, "b": BUDGET, "c": BUDGET})
    assert limiters["b"].num_spent_tokens == 40


async def test_a_budget_raised_or_lowered_keeps_its_count():
    limiters = Limiters({"e": BUDGET})
    await _spend(limiters, "e", 300)
    limiters.update({"e": LimitsConfig(token_budget=2000)})
    assert limiters["e"].num_spent_tokens == 300
    limiters.update({"e": LimitsConfig(token_budget=500)})
    assert limiters["e"].num_spent_tokens == 300
    with pytest.raises(ApiError) as refused:
        await limiters["e"].acquire(201)
    assert refused.value.code == "insufficient_quota"


async def test_a_budget_lifted_and_set_again_starts_from_the_file_not_from_the_spending_between():
    limiters = Limiters({"e": BUDGET})
    limiters.restore_spent({})
    await _spend(limiters, "e", 300)
    limiters.add_spent({}, {"e": 300})   # a save wrote it
    limiters.update({"e": LimitsConfig()})   # lifted: it spends freely
    await _spend(limiters, "e", 5000)
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 300


def test_what_other_gateways_spent_is_counted_into_budgeted_tenants_only():
    limiters = Limiters({"a": BUDGET, "e": LimitsConfig()})
    limiters.restore_spent({})
    limiters.add_spent({"a": 20, "e": 50}, {"a": 20, "e": 50})
    assert (limiters["a"].num_spent_tokens, limiters["e"].num_spent_tokens) == (20, 0)
    limiters.update({"a": BUDGET, "e": BUDGET})
    assert limiters["e"].num_spent_tokens == 50   # the file's count, when it gets a budget


async def test_the_saves_start_a_budget_a_reload_sets_from_the_file_as_it_stands(tmp_path, monkeypatch):
    """Through `start_spent_tokens`: the file is not touched by a tenant without a budget,
    and a budget set again starts from what the last saves wrote, this process's own
    spending among it."""
    from gateway.spent_tokens import start_spent_tokens

    path = tmp_path / "spent.json"
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(path))
    path.write_text(json.dumps({"format": FORMAT, "tenants": {"e": 120}}))
    limiters = Limiters({"e": LimitsConfig()})
    saves = start_spent_tokens(limiters, asyncio.get_running_loop())
    try:
        assert limiters["e"].num_spent_tokens == 0
        await _spend(limiters, "e", 300)
        assert await asyncio.to_thread(saves.save_now)
        assert SpentTokens.load(path).counts == {"e": 120}   # spent without a budget: not written
        limiters.update({"e": BUDGET})
        assert limiters["e"].num_spent_tokens == 120
        await _spend(limiters, "e", 30)
        assert await asyncio.to_thread(saves.save_now)
        assert SpentTokens.load(path).counts == {"e": 150}
        await asyncio.sleep(0.05)   # the counts on file reach the limiters on this (the loop's) thread
        limiters.update({"e": LimitsConfig()})
        await _spend(limiters, "e", 700)
        assert await asyncio.to_thread(saves.save_now)
        limiters.update({"e": BUDGET})
        assert limiters["e"].num_spent_tokens == 150
    finally:
        await asyncio.to_thread(saves.stop)
    assert SpentTokens.load(path).counts == {"e": 150}


async def test_a_budget_lifted_before_its_spending_was_saved_and_set_again_keeps_that_spending(tmp_path, monkeypatch):
    """QA151 L2: 300 tokens spent under a budget, then a reload lifts it before the next
    save, another sets it again: it counts those 300 (was 0, the file's count); a save
    made while it has none writes them, and nothing it spent without one."""
    from gateway.spent_tokens import start_spent_tokens

    limiters = Limiters({"e": BUDGET})
    limiters.restore_spent({})
    await _spend(limiters, "e", 300)
    limiters.update({"e": LimitsConfig()})
    await _spend(limiters, "e", 5000)
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 300

    path = tmp_path / "spent.json"
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(path))
    limiters = Limiters({"e": BUDGET})
    saves = start_spent_tokens(limiters, asyncio.get_running_loop())
    try:
        await _spend(limiters, "e", 300)
        limiters.update({"e": LimitsConfig()})
        await _spend(limiters, "e", 5000)
        assert await asyncio.to_thread(saves.save_now)
        assert SpentTokens.load(path).counts == {"e": 300}
        await asyncio.sleep(0.05)   # the counts on file reach the limiters on this (the loop's) thread
        limiters.update({"e": BUDGET})
        assert limiters["e"].num_spent_tokens == 300
        await _spend(limiters, "e", 20)
    finally:
        await asyncio.to_thread(saves.stop)
    assert SpentTokens.load(path).counts == {"e": 320}


async def test_a_lifted_budgets_saved_count_follows_other_gateways_and_edits_not_its_own_spending():
    limiters = Limiters({"e": BUDGET})
    limiters.restore_spent({})
    await _spend(limiters, "e", 300)
    limiters.update({"e": LimitsConfig()})
    await _spend(limiters, "e", 70)
    assert limiters.budgeted_tenants() == {"e"} and limiters.saved_counts() == {"e": 300}
    limiters.add_spent({"e": 50}, {"e": 350})    # another gateway spent 50
    limiters.add_spent({"e": -100}, {"e": 250})  # an edit gave 100 back
    assert limiters.saved_counts() == {"e": 250} and limiters["e"].num_spent_tokens == 370
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 250 and limiters.saved_counts() == {"e": 250}


MODEL = '''[[models]]
name = "mock"
kind = "upstream"
litellm_model = "openai/gpt-4o-mini"
litellm_params = { mock_response = "Hello from the mock upstream" }
'''


def _config(limits: str) -> str:
    return f'{MODEL}\n[[tenants]]\nname = "e"\napi_key_sha256 = ["{key_digest("sk-e")}"]\n{limits}'


def test_a_reload_that_gives_a_budget_admits_what_a_fresh_start_would(tmp_path, monkeypatch):
    """The gateway itself: a tenant spends without a budget, a reload gives it one smaller
    than what it spent, and its next request is served, not refused `insufficient_quota`."""
    from gateway.app import build_app
    from gateway.reload import reload_tenants

    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(tmp_path / "spent.json"))
    path = tmp_path / "gw.toml"
    path.write_text(_config(""))
    app = build_app(load_config(path), config_path=str(path))
    state = app.state.gateway
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}

    async def serve() -> tuple[int, int, httpx.Response]:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gateway",
                headers={"Authorization": "Bearer sk-e"}) as client:
            for _ in range(4):
                assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
            spent = state.limiters["e"].num_spent_tokens
            path.write_text(_config(f"limits = {{ token_budget = {spent // 2} }}"))
            assert await reload_tenants(state, path) is not None
            return spent, state.limiters["e"].num_spent_tokens, await client.post("/v1/chat/completions", json=body)

    spent_without, spent_with, served = asyncio.run(serve())
    assert served.status_code == 200, served.text   # QA145: a 429 insufficient_quota
    assert spent_without > 0 and spent_with == 0
    assert 0 < state.limiters["e"].num_spent_tokens <= spent_without // 2


async def test_a_request_admitted_under_a_budget_that_a_reload_lifts_while_it_runs_still_counts():
    """QA162 L2: 300 spent, a 600-token request admitted, the budget lifted while it runs,
    the request ends using 500, the budget set again: it counts 800 (was 300), and so does
    what is saved meanwhile; what is spent without the budget does not count."""
    limiters = Limiters({"e": BUDGET})
    limiters.restore_spent({})
    await _spend(limiters, "e", 300)
    running = await limiters["e"].acquire(600)
    limiters.update({"e": LimitsConfig()})
    limiters["e"].release(running, 500)
    await _spend(limiters, "e", 40)   # without a budget
    assert limiters.saved_counts() == {"e": 800}
    limiters.update({"e": BUDGET})
    assert limiters["e"].num_spent_tokens == 800
