"""`stepahead config check FILE` checks a config file as `serve --config` does at its start,
in the start's words, without serving: the example file passes, a bad value, an unknown
key, a bad engine option and a missing file are exit 2 with the start's line, `--json`
says the same in one object, and a port in use is only a warning (the gateway the file is
for may hold it: tests/gateway/test_config_check_start_checks.py has the other checks)."""
from __future__ import annotations

import json
import socket
from pathlib import Path

from gateway.cli import main
from gateway.config import key_digest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stepahead.toml"
TINY = '[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n'
TENANT = f'\n[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n'
PORT_IN_USE = 23281   # this test file's port (the brief's range)


def _check(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["config", "check", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _file(tmp_path, text: str) -> str:
    path = tmp_path / "gw.toml"
    path.write_text(text)
    return str(path)


def _example_env(monkeypatch) -> None:
    """The example's variables set, and its address (127.0.0.1:8000) taken as free: what
    else runs on this machine is not what these tests check."""
    monkeypatch.setenv("SUPPORT_BOT_API_KEY", "sk-support-example")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-example")
    monkeypatch.setattr("gateway.listen_address.address_error", lambda host, port: None)


def test_the_example_config_passes_with_a_one_line_summary(monkeypatch, capsys):
    _example_env(monkeypatch)
    status, out, err = _check(capsys, str(EXAMPLE))
    assert (status, err) == (0, "")
    assert out == (f"{EXAMPLE}: ok\n3 models: smollm2 (local, 2 workers), gpt-4o-mini (upstream), team-vllm "
                   "(upstream); 2 tenants: research-agents, support-bot; 2 local workers\n")


def test_the_example_config_as_json(monkeypatch, capsys):
    _example_env(monkeypatch)
    status, out, _ = _check(capsys, str(EXAMPLE), "--json")
    assert status == 0
    assert json.loads(out) == {
        "ok": True, "file": str(EXAMPLE), "errors": [], "warnings": [],
        "summary": {"models": [{"name": "smollm2", "kind": "local", "workers": 2},
                               {"name": "gpt-4o-mini", "kind": "upstream"},
                               {"name": "team-vllm", "kind": "upstream"}],
                    "tenants": ["research-agents", "support-bot"], "workers": 2}}


def test_the_example_without_its_key_variable_is_the_starts_line(monkeypatch, capsys):
    _example_env(monkeypatch)
    monkeypatch.delenv("SUPPORT_BOT_API_KEY", raising=False)
    status, out, err = _check(capsys, str(EXAMPLE))
    assert (status, out) == (2, "")
    assert err == "stepahead: bad config: tenants[1]: environment variable SUPPORT_BOT_API_KEY is not set\n"


def test_a_bad_value_is_said_in_the_starts_words(tmp_path, capsys):
    path = _file(tmp_path, "[server]\nport = 70000\n" + TINY + TENANT)
    status, out, err = _check(capsys, path)
    assert (status, out) == (2, "")
    assert err == "stepahead: bad config: server.port must be in [0, 65535], got 70000\n"
    assert main(["serve", "--config", path]) == 2   # the start refuses it with the same line
    assert capsys.readouterr().err == err


def test_an_unknown_key_is_said_in_the_starts_words(tmp_path, capsys):
    path = _file(tmp_path, "[server]\nportt = 8000\n" + TINY + TENANT)
    status, out, err = _check(capsys, path)
    assert (status, out) == (2, "")
    assert err.startswith("stepahead: bad config: server: unknown key 'portt'; did you mean 'port'? (known: ")
    assert err.count("\n") == 1


def test_a_bad_engine_option_is_checked_as_the_start_checks_it(tmp_path, capsys):
    path = _file(tmp_path, TINY + '[models.engine]\npolicy = "nope"\n' + TENANT)
    status, out, _ = _check(capsys, path, "--json")
    assert status == 2
    assert json.loads(out) == {
        "ok": False, "file": path, "warnings": [],
        "errors": ["cannot serve model 'tiny': engine option policy must be one of lru, predictive, ttl, kvflow, "
                   "not 'nope'"],
        "summary": {"models": [{"name": "tiny", "kind": "local", "workers": 1}], "tenants": ["a"], "workers": 1}}


def test_a_missing_file_is_exit_2_with_the_path(tmp_path, capsys):
    path = str(tmp_path / "missing.toml")
    status, out, err = _check(capsys, path)
    assert (status, out) == (2, "")
    assert err == f"stepahead: bad config: [Errno 2] No such file or directory: {path!r}\n"
    status, out, _ = _check(capsys, path, "--json")
    assert status == 2
    assert json.loads(out) == {"ok": False, "file": path, "summary": None, "warnings": [],
                               "errors": [f"bad config: [Errno 2] No such file or directory: {path!r}"]}


def test_an_empty_path_is_a_problem_not_the_demo_config(capsys):
    status, _, err = _check(capsys, "")
    assert (status, err) == (2, "stepahead: bad config: --config is empty: give the config file's path (leave "
                                "--config out to serve without one)\n")
    assert main(["serve", "--config", ""]) == 2   # the start's words (QA176 F5)
    assert capsys.readouterr().err == err


def test_a_port_in_use_passes_with_a_warning(tmp_path, capsys):
    """The gateway the file is checked for may be serving on its port now (the check runs
    before a SIGHUP or a restart): said, but no failure; the port is let go at once."""
    path = _file(tmp_path, f"[server]\nport = {PORT_IN_USE}\n" + TINY + TENANT)
    with socket.socket() as held:
        held.bind(("127.0.0.1", PORT_IN_USE))
        held.listen()
        status, out, err = _check(capsys, path)
    assert status == 0
    assert err == (f"stepahead: warning: cannot listen on 127.0.0.1:{PORT_IN_USE}: Address already in use now: "
                   "the start fails while something holds it (a gateway serving there must stop first)\n")
    assert out == f"{path}: ok\n1 model: tiny (local, 1 worker); 1 tenant: a; 1 local worker\n"
    with socket.socket() as again:   # the check's probe did not keep it
        again.bind(("127.0.0.1", PORT_IN_USE))
