"""Reloading a running gateway's tenants from its config file (SIGHUP): keys, admins
and limits at once, the rest at the next start, a bad file changes nothing."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.app import build_app
from gateway.config import key_digest, load_config
from gateway.errors import ApiError
from gateway.reload import reload_tenants
from tests.gateway.serving import free_port

MODEL = '''[[models]]
name = "mock"
kind = "upstream"
litellm_model = "openai/gpt-4o-mini"
litellm_params = { mock_response = "hi" }
'''


def _tenant(name: str, key: str, extra: str = "") -> str:
    return f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(key)}"]\n{extra}'


def test_a_reload_applies_keys_admins_and_limits_and_names_what_waits_for_the_next_start(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a", "limits = { max_concurrent = 2 }")
                    + _tenant("gone", "sk-gone", "kv_share = 0.1"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    kept_limiter = state.limiters["a"]
    path.write_text(MODEL.replace('"hi"', '"hello"')
                    + _tenant("a", "sk-a", "limits = { max_concurrent = 4 }\nadmin = true")
                    + _tenant("b", "sk-b", "weight = 2.0"))
    report = asyncio.run(reload_tenants(state, path))
    assert (report.added, report.removed, report.changed) == (("b",), ("gone",), ("a",))
    assert report.at_next_start == ("[[models]]", "the weight of 'b'", "the kv_share of 'gone'")
    assert state.keys.authenticate("Bearer sk-b") == "b" and state.keys.authenticate("Bearer sk-a") == "a"
    with pytest.raises(ApiError) as refused:
        state.keys.authenticate("Bearer sk-gone")
    assert refused.value.status == 401
    assert state.config.is_admin("a") and [t.name for t in state.config.tenants] == ["a", "b"]
    assert state.limiters["a"] is kept_limiter and kept_limiter.limits.max_concurrent == 4
    assert state.config.models[0].litellm_params == (("mock_response", "hi"),)   # models: at the next start
    assert capsys.readouterr().err.strip() == (
        f"stepahead: reloaded the tenants from {path}: 1 added (b), 1 removed (gone), 1 changed (a); "
        "at the next start: [[models]], the weight of 'b', the kv_share of 'gone'")


@pytest.mark.parametrize("broken", ["[[tenants]]\nname = ", MODEL, None])
def test_a_file_that_does_not_load_changes_nothing(tmp_path, caplog, broken):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    if broken is None:
        path.unlink()
    else:   # not TOML; no tenants at all
        path.write_text(broken)
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running and state.keys.authenticate("Bearer sk-a") == "a"
    assert f"stepahead: the tenants were not reloaded from {path}: " in caplog.text


def test_sighup_reloads_the_tenants_of_a_served_config(tmp_path):
    from tests.gateway.test_cli import STORE_ENV

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
             **{name: str(tmp_path / name) for name in STORE_ENV}},
        cwd=Path(__file__).resolve().parents[2])
    try:
        url = f"http://127.0.0.1:{port}/v1/models"

        def status(key: str) -> int:
            return httpx.get(url, headers={"authorization": f"Bearer {key}"}, timeout=10).status_code

        deadline_s = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert server.poll() is None and time.monotonic() < deadline_s, "the gateway did not start"
            time.sleep(0.2)
        assert (status("sk-a"), status("sk-b")) == (200, 401)
        path.write_text(MODEL + _tenant("b", "sk-b"))
        server.send_signal(signal.SIGHUP)
        deadline_s = time.monotonic() + 30
        while status("sk-b") != 200:
            assert server.poll() is None and time.monotonic() < deadline_s, "SIGHUP did not reload"
            time.sleep(0.1)
        assert status("sk-a") == 401   # its key was taken away with it
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert "reloaded the tenants from" in err and "1 added (b), 1 removed (a)" in err
