"""`stepahead traces --config FILE` with a config it cannot use: one line, exit 2, never a
traceback (agents_trace/traces_lookup.py `store_path`)."""
from __future__ import annotations

import argparse

import pytest

from agents_trace.traces_lookup import CommandError, store_path


def _args(config) -> argparse.Namespace:
    return argparse.Namespace(db=None, config=str(config))


@pytest.mark.parametrize("content, words", [
    (b"tracing = 5\n", "tracing must be a table, not 5"),
    (b"[[tracing]]\nenabled = true\n", "tracing must be a table"),
    (b"\xff\xfe\n", "not UTF-8 text"),
    (b"[tracing]\nenabled = 3\n", "tracing.enabled must be true or false"),
    (b"[tracing\n", "bad config"),
])
def test_a_config_it_cannot_use_is_one_line_and_exit_2(tmp_path, content, words):
    config = tmp_path / "gw.toml"
    config.write_bytes(content)
    with pytest.raises(CommandError) as raised:
        store_path(_args(config))
    assert raised.value.code == 2
    message = str(raised.value)
    assert message.startswith("bad config: ") and words in message and "\n" not in message


def test_a_config_without_tracing_finds_the_default_store(tmp_path, monkeypatch):
    store = tmp_path / "t.sqlite3"
    store.write_bytes(b"")
    monkeypatch.setenv("STEPAHEAD_TRACE_DB", str(store))
    config = tmp_path / "gw.toml"
    config.write_text('[[models]]\nname = "tiny"\n')
    assert store_path(_args(config)) == store


def test_a_config_naming_the_store_is_followed(tmp_path):
    store = tmp_path / "mine.sqlite3"
    store.write_bytes(b"")
    config = tmp_path / "gw.toml"
    config.write_text(f'[tracing]\nstore_path = "{store}"\n')
    assert store_path(_args(config)) == store
