"""The command line's own help says what the docs say: where hash-key reads the key,
what `--port 0` does, the workload subcommands listed as COMMAND like the traces ones,
the generator's defaults in plain words."""
from __future__ import annotations

import pytest

from gateway.cli import main


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    return " ".join(capsys.readouterr().out.split())   # argparse's line wrapping aside


def test_hash_key_help_says_the_key_is_read_from_stdin(capsys):
    assert 'echo -n "$KEY" | stepahead hash-key' in _help(capsys, "hash-key")


def test_serve_help_says_port_0_takes_a_free_port(capsys):
    assert "0: a free port" in _help(capsys, "serve")


def test_workload_lists_its_subcommands_as_traces_does(capsys):
    assert "stepahead traces [-h] COMMAND ..." in _help(capsys, "traces")
    assert "stepahead workload [-h] COMMAND ..." in _help(capsys, "workload")


def test_workload_generate_help_says_the_tool_seed_default_in_words(capsys):
    text = _help(capsys, "workload", "generate")
    assert "(default: the --seed value)" in text and "None" not in text
