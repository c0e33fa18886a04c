"""A step served by a local engine with `prefix_caching = false` counts no prefix reuse and
no eviction, live (`/metrics`) or in the trace store (steps, stats, `traces show`): with no
cache nothing was kept, so nothing was evicted (QA80 F1). The same steps on a caching
engine count what their previous prompt left them, and what the cache no longer held."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from agents_trace.prompt_blocks import RECORD_BLOCK_SIZE
from agents_trace.step_queries import list_steps
from agents_trace.store_stats import StatsWindow, tenant_stats
from gateway.model_backends import build_backend
from gateway.backend import Finished, Prepared, Usage
from gateway.cli import main as cli_main
from gateway.collected import Reply
from gateway.config import key_digest, parse_config
from gateway.exchange import Exchange
from gateway.metrics import Registry

from tests.agents_trace.helpers import ManualClock, make_tracer

B = RECORD_BLOCK_SIZE
SHARED = list(range(1000, 1000 + 6 * B))   # six whole blocks both prompts begin with


def _state(tmp_path, prefix_caching: bool):
    config = parse_config({
        "models": [{"name": "tiny", "kind": "local", "path": "tiny", "num_workers": 1,
                    "engine": {"prefix_caching": prefix_caching}}],
        "tenants": [{"name": "acme", "api_key_sha256": [key_digest("sk-fi9")]}]})
    clock = ManualClock()
    tracer, _ = make_tracer(tmp_path, clock)
    backend = build_backend(config.models[0], config)   # built, not started: its config is what counts
    return SimpleNamespace(backends={"tiny": backend}, metrics=Registry(), tracer=tracer, limiters={}), clock


def _step(state, clock, index: int, prompt: list[int]) -> None:
    """One successful step of session "s" on model "tiny", nothing of its prompt cached."""
    ctx = state.tracer.begin("acme", {"x-session-id": "s"},
                             {"model": "tiny", "messages": [{"role": "user", "content": f"q{i}"}
                                                            for i in range(index + 1)]})
    prepared = Prepared(request_id=f"chatcmpl-{index}", tenant="acme", model="tiny",
                        num_prompt_tokens=len(prompt), num_reserved_tokens=len(prompt) + 2,
                        prompt_token_ids=prompt)
    exchange = Exchange(state, prepared, "chat", time.perf_counter(), trace=ctx, output=Reply.of(1, 1))
    clock.advance(0.5)
    exchange.close(Finished("stop", Usage(len(prompt), 2, 0), worker="w0"), 200)


def _counter(state, name: str) -> float:
    return state.metrics.counters.get((name, (("tenant", "acme"), ("model_name", "tiny"))), 0)


@pytest.mark.parametrize("prefix_caching, from_previous, evicted", [
    (True, 6 * B, 6 * B),     # a caching engine that kept nothing: all six blocks were evicted
    (False, None, None),      # no cache: no reuse to count, nothing evicted
])
def test_a_step_without_prefix_caching_counts_no_eviction_live_or_stored(tmp_path, capsys, prefix_caching,
                                                                         from_previous, evicted):
    state, clock = _state(tmp_path, prefix_caching)
    _step(state, clock, 0, SHARED + [1, 2, 3])
    _step(state, clock, 1, SHARED + [4, 5, 6, 7])
    state.tracer.stop()
    assert _counter(state, "stepahead_evicted_prefix_tokens_total") == (evicted or 0)
    assert _counter(state, "stepahead_prefix_from_previous_tokens_total") == (from_previous or 0)
    store = tmp_path / "traces.sqlite3"
    steps = list_steps(store, "acme", "s")["data"]
    assert [(s["prefix_from_previous_tokens"], s["evicted_prefix_tokens"]) for s in steps] == [
        (None, None), (from_previous, evicted)]   # the API /ui reads: a red cell only where evicted > 0
    total = tenant_stats(store, StatsWindow())["total"]
    assert (total["prefix_from_previous_tokens"], total["evicted_prefix_tokens"],
            total["steps_with_evicted_prefix"]) == (from_previous or 0, evicted or 0, 1 if evicted else 0)
    assert cli_main(["traces", "show", "s", "--db", str(store)]) == 0
    assert ("evicted while the session was away" in capsys.readouterr().out) is bool(evicted)


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_the_gateway_reads_prefix_caching_from_the_models_engine_config(tmp_path, prefix_caching):
    from gateway.exchange import keeps_prefix_cache
    state, _ = _state(tmp_path, prefix_caching)
    state.tracer.stop()
    assert keeps_prefix_cache(state, "tiny") is prefix_caching
    assert keeps_prefix_cache(state, "some-upstream") is True   # not a local engine: as before
