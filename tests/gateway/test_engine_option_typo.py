"""A misspelt `[models.engine]` option is worded as a typo in any other table (QA192 F3):
one `stepahead: bad config: models[i].engine: unknown key ...; did you mean ...? (known:
...)` line, exit status 2, from `serve`, `config check` and a SIGHUP reload alike.

Known failure: it said `cannot serve model 'smollm2': unknown engine option
'num_hot_block'; known: ...`, without the `bad config:` prefix and without the suggestion
every other table's typo gets.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main
from gateway.config import key_digest
from shards.engine import LocalEngine
from tests.gateway.test_reload import refused_reload_line

KNOWN = ", ".join(sorted(name for name in LocalEngine.__init__.__kwdefaults__))
TYPO_LINE = (f"bad config: models[1].engine: unknown key 'num_hot_block'; did you mean 'num_hot_blocks'? "
             f"(known: {KNOWN})")


def _file(tmp_path: Path, engine: str) -> Path:
    """Two local models: the typo is in the second one's engine table (models[1])."""
    path = tmp_path / "typo.toml"
    path.write_text("[[models]]\nname = 'first'\npath = 'tiny'\nnum_workers = 1\n"
                    "[[models]]\nname = 'tiny'\npath = 'tiny'\nnum_workers = 1\n"
                    f"[models.engine]\n{engine}\n"
                    f"[[tenants]]\nname = 't'\napi_key_sha256 = ['{key_digest('k')}']\n")
    return path


def test_serve_says_bad_config_with_a_suggestion_in_one_line(tmp_path, capsys):
    assert main(["serve", "--config", str(_file(tmp_path, "num_hot_block = 64"))]) == 2
    assert capsys.readouterr().err == f"stepahead: {TYPO_LINE}\n"


def test_config_check_says_what_the_start_says(tmp_path, capsys):
    assert main(["config", "check", str(_file(tmp_path, "num_hot_block = 64"))]) == 2
    assert capsys.readouterr().err == f"stepahead: {TYPO_LINE}\n"


@pytest.mark.parametrize("engine, line", [
    ("zzzzzz = 1", "unknown key 'zzzzzz' (known: "),   # nothing near: no suggestion
    ("decode_bath = 4", "unknown key 'decode_bath'; did you mean 'decode_batch'? (known: block_size, "),
])
def test_the_suggestion_is_made_only_when_one_is_near(tmp_path, capsys, engine, line):
    assert main(["config", "check", str(_file(tmp_path, engine))]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"stepahead: bad config: models[1].engine: {line}") and err.count("\n") == 1


def test_a_reload_with_the_typo_is_refused_with_the_same_words(tmp_path, caplog):
    refusal = refused_reload_line(tmp_path, caplog, "", "num_hot_block = 64\n")
    assert refusal == TYPO_LINE.replace("models[1]", "models[0]")
