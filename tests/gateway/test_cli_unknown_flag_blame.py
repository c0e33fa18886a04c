"""An unknown argument is reported under the usage of the (sub)command whose part of the
command line holds it: `stepahead --bogus serve` under the top level's (QA221 F8: it was
serve's), `stepahead serve --bogus` under serve's, `stepahead traces --bogus list` under
traces'."""
from __future__ import annotations

import pytest

from gateway.cli import main


def _error(capsys, *argv: str) -> tuple[str, str]:
    with pytest.raises(SystemExit) as raised:
        main(list(argv))
    assert raised.value.code == 2
    err = capsys.readouterr().err
    return err.splitlines()[0], err.splitlines()[-1]


def test_a_flag_before_the_subcommand_blames_the_top_level(capsys):
    usage, error = _error(capsys, "--bogus", "serve")
    assert usage.startswith("usage: stepahead [-h]")
    assert error == "stepahead: error: unrecognized arguments: --bogus"


def test_a_flag_after_a_command_blames_that_command(capsys):
    usage, error = _error(capsys, "serve", "--bogus")
    assert usage.startswith("usage: stepahead serve ")
    assert error == "stepahead serve: error: unrecognized arguments: --bogus"
    usage, error = _error(capsys, "traces", "--bogus", "list")
    assert usage.startswith("usage: stepahead traces ") and error.startswith("stepahead traces: error: ")
