"""`stepahead serve` and `uvicorn --factory` with a config: $STEPAHEAD_CONFIG is the file
when `--config` gives none (as under the factory), a bad file under the factory is one
line and exit 2, and an unknown flag shows the sub-command's usage (a reload refusing
`policy_options` the next start would refuse: tests/gateway/test_reload.py)."""
from __future__ import annotations

import signal

import pytest

from gateway.app import build_app
from gateway.cli import main
from gateway.config import key_digest
from tests.gateway.serving import free_port

MODEL = ('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
         'litellm_params = { mock_response = "hi" }\n')
LOCAL = '[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n[models.engine]\n'


def _tenant(name: str, key: str) -> str:
    return f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest(key)}"]\n'


def test_serve_reads_stepahead_config_when_no_config_flag_is_given(monkeypatch, tmp_path, capsys):
    import uvicorn

    import gateway.app

    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    built = {}
    real_build_app = gateway.app.build_app

    def spy(config, *, config_path=None, **others):
        built["config_path"], built["tenants"] = config_path, [tenant.name for tenant in config.tenants]
        return real_build_app(config, config_path=config_path, **others)

    monkeypatch.setattr(gateway.app, "build_app", spy)
    monkeypatch.setattr(uvicorn.Server, "run", lambda server, sockets=None: setattr(server, "started", True))
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(path))
    assert main(["serve", "--port", str(free_port())]) == 0
    assert built == {"config_path": str(path), "tenants": ["a"]}   # the file's tenants, reloaded from it too
    assert f"stepahead: the config file is $STEPAHEAD_CONFIG's: {path}" in capsys.readouterr().err


def test_serve_refuses_no_config_flags_next_to_stepahead_config_and_names_it(monkeypatch, tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + _tenant("a", "sk-a"))
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(path))
    assert main(["serve", "--model", "tiny"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("stepahead: bad config: --model applies only without --config")
    assert f"$STEPAHEAD_CONFIG names {path}: unset it to serve without a config file" in err


def test_the_factory_with_a_bad_stepahead_config_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(MODEL + _tenant("a", "sk-a") + "[tenant]\n")
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(path))
    before = signal.getsignal(signal.SIGHUP)   # the factory path counts SIGHUPs from its first step
    try:
        with pytest.raises(SystemExit) as raised:
            build_app()
    finally:
        signal.signal(signal.SIGHUP, before)
    assert raised.value.code == 2
    assert capsys.readouterr().err == ("stepahead: bad config: the config: unknown table 'tenant'; did you mean "
                                       "'tenants'? (known: models, server, tenants, tracing)\n")


@pytest.mark.parametrize("where, says", [
    ("missing.toml", "No such file or directory"),
    (".", "Is a directory"),
    ("lru.toml", "engine option policy_options does not suit policy 'lru'"),   # checked as `serve` checks it
])
def test_the_factory_with_a_file_it_cannot_read_or_serve_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys,
                                                                                  where, says):
    # QA87: a missing file, a directory or policy_options the policy refuses were a traceback and exit 1
    (tmp_path / "lru.toml").write_text(LOCAL + 'policy = "lru"\npolicy_options = { pin_cap_frac = 0.2 }\n'
                                       + _tenant("a", "sk-a"))
    monkeypatch.setenv("STEPAHEAD_CONFIG", str(tmp_path / where))
    before = signal.getsignal(signal.SIGHUP)
    try:
        with pytest.raises(SystemExit) as raised:
            build_app()
    finally:
        signal.signal(signal.SIGHUP, before)
    err = capsys.readouterr().err
    assert raised.value.code == 2 and err.startswith("stepahead: bad config: ") and says in err
    assert err.count("\n") == 1


def test_an_unknown_flag_shows_the_sub_commands_usage(capsys):
    with pytest.raises(SystemExit) as raised:
        main(["serve", "--bogus"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: stepahead serve ") and err.endswith(
        "stepahead serve: error: unrecognized arguments: --bogus\n")
    with pytest.raises(SystemExit):
        main(["traces", "list", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: stepahead traces list ")
