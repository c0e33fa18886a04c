"""`stepahead replay --tenant-keys-file FILE`: many tenants' keys without putting them in
the process list (QA174 replayed 299 tenants with 299 `--tenant-key` arguments). The file's
errors are one `error:` line and exit status 2 naming the line, never a key; a
`--tenant-key` wins over the file; a file others can read is a warning, not an error.
`--session-suffix` with a value starting with '-' is given with '='."""
from __future__ import annotations

import argparse
import os

import pytest

import agents_trace.replay.cli as replay_cli
from agents_trace.replay.model_lookup import GatewayUnreachable
from gateway.cli import main

SECRET = "sk-SECRET-never-shown"


def _trace(tmp_path, tenants=("acme", "beta")):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"t": {i}, "tenant": "{t}", "input_tokens": 4, "output_tokens": 1}}\n'
                             for i, t in enumerate(tenants)))
    return trace


def _keys_file(tmp_path, text: str, mode: int = 0o600):
    path = tmp_path / "keys.txt"
    path.write_text(text)
    os.chmod(path, mode)
    return path


def _run(tmp_path, monkeypatch, *flags: str) -> tuple[int, dict | None]:
    """Exit status of a replay of a two-tenant trace, and the tenant keys it would send
    with (None: it stopped before the replay)."""
    sent: dict = {}

    async def no_gateway(records, header, options):
        sent["keys"] = dict(options.tenant_keys)
        raise GatewayUnreachable("not here")

    monkeypatch.setattr(replay_cli, "replay", no_gateway)
    status = main(["replay", str(_trace(tmp_path)), "--base-url", "http://127.0.0.1:9", "--api-key", "k",
                   "--model", "m", "--no-progress", *flags])
    return status, sent.get("keys")


def test_the_keys_file_gives_each_tenant_its_key(tmp_path, monkeypatch, capsys):
    keys = _keys_file(tmp_path, "# keys for the replay\n\n  acme = K1 \r\nbeta=K2=with=equals\n   # indented\n")
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys)) == (2, {"acme": "K1",
                                                                                 "beta": "K2=with=equals"})
    assert "warning" not in capsys.readouterr().err   # chmod 600, both tenants in the trace


def test_a_tenant_key_on_the_command_line_wins_over_the_file(tmp_path, monkeypatch):
    keys = _keys_file(tmp_path, "acme=FROMFILE\nbeta=K2\n")
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys), "--tenant-key", "acme=CLI")[1] == {
        "acme": "CLI", "beta": "K2"}


@pytest.mark.parametrize("text,line,what", [
    (f"acme=K1\n{SECRET}\n", 2, "expected TENANT=KEY"),
    (f"acme=K1\n\nbeta={SECRET}\n# c\n={SECRET}\n", 5, "expected TENANT=KEY"),
    ("acme=\n", 1, "expected TENANT=KEY"),
    (f"acme=K1\nbeta=K2\nacme={SECRET}\n", 3, "a second key for tenant 'acme' (the first is on line 1)"),
])
def test_a_malformed_line_or_a_duplicate_tenant_is_refused_naming_the_line_not_the_key(
        tmp_path, monkeypatch, capsys, text, line, what):
    keys = _keys_file(tmp_path, text)
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys)) == (2, None)
    err = capsys.readouterr().err
    assert err == f"error: --tenant-keys-file {keys} line {line}: {what}\n"
    assert SECRET not in err


def test_a_keys_file_not_utf8_names_its_line(tmp_path, monkeypatch, capsys):
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"acme=K1\nbeta=\xff\xfe\n")
    os.chmod(keys, 0o600)
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys)) == (2, None)
    assert capsys.readouterr().err == f"error: --tenant-keys-file {keys} line 2: not UTF-8 text\n"


def test_an_unreadable_keys_file_is_refused(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "nosuch.txt"
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(missing)) == (2, None)
    assert capsys.readouterr().err == (f"error: cannot read --tenant-keys-file {missing}: "
                                       "No such file or directory\n")
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(tmp_path)) == (2, None)
    assert capsys.readouterr().err.startswith(f"error: cannot read --tenant-keys-file {tmp_path}: ")


@pytest.mark.parametrize("mode,warned", [(0o600, False), (0o400, False), (0o640, True), (0o604, True)])
def test_a_keys_file_others_can_read_is_a_warning_once_not_an_error(tmp_path, monkeypatch, capsys, mode, warned):
    keys = _keys_file(tmp_path, "acme=K1\n", mode)
    assert _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys)) == (2, {"acme": "K1"})
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == ([f"warning: --tenant-keys-file {keys} is readable by others than its owner "
                         f"(mode {mode:04o}): chmod 600 {keys}"] if warned else [])


def test_file_tenants_the_trace_lacks_are_one_short_warning(tmp_path, monkeypatch, capsys):
    keys = _keys_file(tmp_path, "".join(f"t{i:03d}=K{i}\n" for i in range(299)) + "acme=K\n")
    status, sent = _run(tmp_path, monkeypatch, "--tenant-keys-file", str(keys))
    assert status == 2 and len(sent) == 300
    [warning] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: --tenant-key or --tenant-keys-file for 't000', 't001', ")
    assert "'t009' and 289 more: the trace has no such tenant" in warning and "K1" not in warning


def test_session_suffix_starting_with_a_dash_is_documented_with_equals(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")   # no wrapping, which may split the example at a '-'
    parser = argparse.ArgumentParser(prog="stepahead replay")
    replay_cli.add_replay_arguments(parser)
    args = parser.parse_args(["t.jsonl", "--base-url", "http://h", "--api-key", "k", "--session-suffix=-r1"])
    assert args.session_suffix == "-r1"
    assert "--session-suffix=-r1" in " ".join(parser.format_help().split())
