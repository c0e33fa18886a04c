"""`config check` runs the start's checks that need no model (QA176 F1, F4): a trace store,
responses' file or spent-tokens file in a place that cannot be written fails it with the
start's reason (`check_store_places`, which the start runs before the models load), all of
them in one line; an address that is not this machine's fails it with the start's line;
an upstream model's unset `api_base_env`/`api_key_env` variable is the start's warning,
on stderr and in `--json`'s "warnings", and fails nothing."""
from __future__ import annotations

import json

import pytest

from gateway.cli import main
from gateway.config import key_digest, load_config
from gateway.config_check import check_config_file
from gateway.start_failure import StartFailed
from gateway.store_places import check_store_places

PORT = 23480   # this test file's port (the brief's range)
TINY = '[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n'
TENANT = f'\n[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n'
UPSTREAM = ('[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
            'api_key_env = "F93_NOPE_KEY"\napi_base_env = "F93_NOPE_BASE"\n')


def _file(tmp_path, text: str, server: str = "") -> str:
    path = tmp_path / "gw.toml"
    path.write_text(f"[server]\nport = {PORT}\n{server}" + text)
    return str(path)


def _blocked(tmp_path) -> str:
    """A directory that cannot be made, even by root: its parent is a file."""
    (tmp_path / "a-file").write_text("")
    return str(tmp_path / "a-file" / "sub")


def test_unwritable_store_places_fail_the_check_as_they_fail_the_start(tmp_path, monkeypatch, capsys):
    blocked = _blocked(tmp_path)
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", f"{blocked}/spent.json")
    path = _file(tmp_path, TINY + TENANT + "[tenants.limits]\ntoken_budget = 1000\n"
                 + f'[tracing]\nenabled = true\nstore_path = "{blocked}/traces.db"\n',
                 server=f'responses_db = "{blocked}/r.db"\n')
    with pytest.raises(StartFailed) as failed:   # what the start runs before the models load
        check_store_places(load_config(path))
    start_reason = str(failed.value)
    for what in ("the trace store ", "the stored responses' file ", "the tenants' spent tokens file "):
        assert what in start_reason
    assert main(["config", "check", path]) == 2
    assert capsys.readouterr() == ("", f"stepahead: the start would fail: {start_reason}\n")
    result = check_config_file(path)
    assert result.errors == (f"the start would fail: {start_reason}",) and result.summary is not None


def test_writable_store_places_pass(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STEPAHEAD_SPENT_TOKENS", str(tmp_path / "spent" / "spent.json"))
    path = _file(tmp_path, TINY + TENANT + "[tenants.limits]\ntoken_budget = 1000\n"
                 + f'[tracing]\nenabled = true\nstore_path = "{tmp_path}/traces/traces.db"\n')
    assert main(["config", "check", path]) == 0
    assert capsys.readouterr().err == ""


def test_an_address_not_of_this_machine_fails_the_check_in_the_starts_words(tmp_path, capsys):
    path = _file(tmp_path, TINY + TENANT, server='host = "10.255.255.1"\n')
    assert main(["config", "check", path]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"stepahead: cannot listen on 10.255.255.1:{PORT}: ") and err.count("\n") == 1


def test_an_upstream_models_unset_variables_are_the_starts_warning_not_a_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("F93_NOPE_KEY", raising=False)
    monkeypatch.delenv("F93_NOPE_BASE", raising=False)
    path = _file(tmp_path, TINY + UPSTREAM + TENANT)
    warning = ("model 'up': api_key_env names $F93_NOPE_KEY, which is not set (or empty): its calls go upstream "
               "without an API key; api_base_env names $F93_NOPE_BASE, which is not set (or empty): its calls "
               "fail (503 upstream_not_configured)")
    assert main(["config", "check", path]) == 0
    out, err = capsys.readouterr()
    assert err == f"stepahead: warning: {warning}\n"
    assert out.startswith(f"{path}: ok\n2 models: ")
    assert main(["config", "check", "--json", path]) == 0
    reply = json.loads(capsys.readouterr().out)
    assert (reply["ok"], reply["errors"], reply["warnings"]) == (True, [], [warning])
    monkeypatch.setenv("F93_NOPE_KEY", "sk-x")
    monkeypatch.setenv("F93_NOPE_BASE", "http://127.0.0.1:1/v1")
    assert main(["config", "check", path]) == 0
    assert capsys.readouterr().err == ""
