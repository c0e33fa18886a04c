"""benchmarks/bench_gateway_overhead.py's server environment: a benchmark's gateway keeps
its traces, forecasts, stored responses and spent tokens in the benchmark's scratch directory."""
from __future__ import annotations

from pathlib import Path

from agents_trace.config import STORE_PATH_ENV, TraceConfig
from benchmarks.bench_servers import gateway_state_env, server_env
from gateway.config import RESPONSES_DB_ENV
from gateway.forecasting_start import PREDICTOR_DIR_ENV
from gateway.spent_tokens import PATH_ENV as SPENT_TOKENS_ENV
from gateway.spent_tokens import spent_tokens_path


def test_every_piece_of_gateway_state_lives_under_the_scratch_directory(tmp_path):
    env = server_env(tmp_path)
    names = (STORE_PATH_ENV, PREDICTOR_DIR_ENV, RESPONSES_DB_ENV, SPENT_TOKENS_ENV)
    assert set(gateway_state_env(tmp_path)) == set(names)
    for name in names:
        assert Path(env[name]).parent == tmp_path
    assert spent_tokens_path(env) == tmp_path / "spent_tokens.json"
    assert TraceConfig().resolved_store_path(env) == tmp_path / "traces.sqlite3"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["BENCH_UPSTREAM_KEY"]
