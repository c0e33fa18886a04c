"""A config file whose tables or arrays nest too deeply (QA176 F2: 5000 nested arrays in
10 KB gave a RecursionError traceback) is a bad config everywhere: `load_config` raises a
ConfigError saying so, `config check` says it in one line (and `--json` prints its
object), `serve --config` exits 2 with that line, and a SIGHUP reload logs that the tenants
were not reloaded, the running ones kept."""
from __future__ import annotations

import asyncio
import json
import logging

import pytest

from gateway.app import build_app
from gateway.cli import main
from gateway.config import ConfigError, key_digest, load_config
from gateway.reload import reload_tenants

MODEL = ('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
         'litellm_params = { mock_response = "hi" }\n')
TENANT = f'\n[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n'
DEEP = {
    "arrays": "a = " + "[" * 5000 + "]" * 5000 + "\n",
    "inline tables": "a = " + "{b = " * 5000 + "1" + "}" * 5000 + "\n",
    "table headers": "[" + ".".join(["a"] * 5000) + "]\n",   # nested without the parser recursing
    "engine options": MODEL + TENANT + '[[models]]\nname = "tiny"\npath = "tiny"\n[models.engine.'
                      + ".".join(["x"] * 5000) + "]\ny = 1\n",
}
TOO_DEEP = "tables or arrays nested too deeply (more than 100 levels)"   # gateway.config.MAX_NESTING


@pytest.mark.parametrize("text", DEEP.values(), ids=DEEP.keys())
def test_load_config_says_nested_too_deeply(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert str(refused.value) == f"{path}: {TOO_DEEP}"


def test_a_config_nested_a_few_levels_still_loads(tmp_path):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL.replace('mock_response = "hi"', 'mock_response = "hi", extra_body = { a = { b = [[1]] } }')
                    + TENANT)
    assert [model.name for model in load_config(path).models] == ["mock"]


def test_check_and_serve_say_it_in_one_line(tmp_path, capsys):
    path = tmp_path / "deep.toml"
    path.write_text(DEEP["arrays"])
    line = f"stepahead: bad config: {path}: {TOO_DEEP}\n"
    assert main(["config", "check", str(path)]) == 2
    assert capsys.readouterr() == ("", line)
    assert main(["config", "check", "--json", str(path)]) == 2
    assert json.loads(capsys.readouterr().out) == {
        "ok": False, "file": str(path), "errors": [line.removeprefix("stepahead: ").rstrip("\n")], "warnings": [],
        "summary": None}
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == line


def test_a_reload_of_a_deep_file_is_refused_and_logged(tmp_path, caplog):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + TENANT)
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    running = state.config
    path.write_text(DEEP["inline tables"])
    with caplog.at_level(logging.ERROR, logger="stepahead"):
        assert asyncio.run(reload_tenants(state, path)) is None
    assert state.config is running and state.keys.authenticate("Bearer sk-a") == "a"
    assert f"stepahead: the tenants were not reloaded from {path}: {TOO_DEEP}" in caplog.text
