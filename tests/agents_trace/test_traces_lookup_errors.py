"""`stepahead traces` finding its store: a TOML error names the config file (as `serve`
says it), a config saved with a UTF-8 BOM loads, and a `--db` that is a directory is a
wrong path (exit 2), not "no store yet" (agents_trace/traces_lookup.py `store_path`)."""
from __future__ import annotations

import argparse

import pytest

from agents_trace.traces_lookup import CommandError, store_path


def test_a_toml_error_in_the_config_names_the_file(tmp_path):
    config = tmp_path / "malformed.toml"
    config.write_text("[[tracing\n")
    with pytest.raises(CommandError) as raised:
        store_path(argparse.Namespace(db=None, config=str(config)))
    assert raised.value.code == 2
    assert str(raised.value).startswith(f"bad config: {config}: ") and "line 1" in str(raised.value)


def test_a_config_with_a_utf8_bom_loads(tmp_path):
    store = tmp_path / "t.sqlite3"
    store.write_bytes(b"")
    config = tmp_path / "bom.toml"
    config.write_bytes(b"\xef\xbb\xbf" + f'[tracing]\nstore_path = "{store}"\n'.encode())
    assert store_path(argparse.Namespace(db=None, config=str(config))) == store


@pytest.mark.parametrize("must_exist", [True, False])
def test_a_db_that_is_a_directory_is_exit_2_and_says_so(tmp_path, must_exist):
    with pytest.raises(CommandError) as raised:
        store_path(argparse.Namespace(db=str(tmp_path), config=None), must_exist=must_exist)
    assert raised.value.code == 2
    assert str(raised.value) == f"{tmp_path} is a directory, not a trace store (give the store's file)"
