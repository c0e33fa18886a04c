"""A reload refuses a file whose stores' places the next start would refuse (QA225 F1): a
changed `[server] responses_db` or `[tracing] store_path` that cannot be written is tried
as `config check` tries it (`store_places_failure`) and refused in the words a model the
next start would refuse is; the running tenants keep serving."""
from __future__ import annotations

import asyncio
import logging

import pytest

from gateway.app import build_app
from gateway.config import key_digest, load_config
from gateway.config_check import check_config_file
from gateway.errors import ApiError
from gateway.reload import reload_tenants

MODEL = ('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
         'litellm_params = { mock_response = "hi" }\n')


def _tenant(name: str) -> str:
    return f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(f"sk-{name}")}"]\n'


def _file(tmp_path, responses: str, traces: str, tenants: str) -> str:
    return (f'[server]\nresponses_db = "{responses}"\n[tracing]\nenabled = true\nstore_path = "{traces}"\n'
            + MODEL + tenants)


@pytest.mark.parametrize("setting, what", [("responses", "the stored responses' file "),
                                           ("traces", "the trace store ")])
def test_a_reload_moving_a_store_where_it_cannot_write_is_refused_and_the_tenants_keep_serving(
        tmp_path, caplog, setting, what):
    (tmp_path / "a-file").write_text("")
    places = {"responses": str(tmp_path / "r.sqlite3"), "traces": str(tmp_path / "traces.db")}
    path = tmp_path / "gw.toml"
    path.write_text(_file(tmp_path, **places, tenants=_tenant("a")))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    places[setting] = str(tmp_path / "a-file" / "sub" / "place.db")   # under a file: even root cannot write it
    path.write_text(_file(tmp_path, **places, tenants=_tenant("a") + _tenant("b")))
    check = check_config_file(str(path))
    assert len(check.errors) == 1 and check.errors[0].startswith(f"the start would fail: {what}")
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running and state.keys.authenticate("Bearer sk-a") == "a"
    with pytest.raises(ApiError):
        state.keys.authenticate("Bearer sk-b")
    assert caplog.messages == [f"stepahead: the tenants were not reloaded from {path}: the next "
                               + check.errors[0].removeprefix("the ")]   # the check's reason, word for word


def test_a_reload_moving_a_store_where_it_can_write_goes_on(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(_file(tmp_path, tmp_path / "r.sqlite3", tmp_path / "traces.db", _tenant("a")))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    path.write_text(_file(tmp_path, tmp_path / "new" / "r.sqlite3", tmp_path / "new" / "traces.db",
                          _tenant("a") + _tenant("b")))
    report = asyncio.run(reload_tenants(state, path))
    assert report.added == ("b",) and report.at_next_start == ("[tracing]", "[server] responses_db")
    assert state.keys.authenticate("Bearer sk-b") == "b"
    assert (tmp_path / "new" / "r.sqlite3").exists()   # tried as the check tries it: opened (made)
