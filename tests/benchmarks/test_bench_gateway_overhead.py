"""benchmarks/bench_gateway_overhead.py's server environment: a benchmark's gateway keeps
its traces, forecasts and stored responses in the benchmark's scratch directory."""
from __future__ import annotations

from pathlib import Path

from agents_trace.config import STORE_PATH_ENV, TraceConfig
from benchmarks.bench_gateway_overhead import gateway_state_env, server_env
from gateway.config import RESPONSES_DB_ENV
from gateway.forecasting import PREDICTOR_DIR_ENV


def test_every_piece_of_gateway_state_lives_under_the_scratch_directory(tmp_path):
    env = server_env(tmp_path)
    assert set(gateway_state_env(tmp_path)) == {STORE_PATH_ENV, PREDICTOR_DIR_ENV, RESPONSES_DB_ENV}
    for name in (STORE_PATH_ENV, PREDICTOR_DIR_ENV, RESPONSES_DB_ENV):
        assert Path(env[name]).parent == tmp_path
    assert TraceConfig().resolved_store_path(env) == tmp_path / "traces.sqlite3"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True" and env["BENCH_UPSTREAM_KEY"]
