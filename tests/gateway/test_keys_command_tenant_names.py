"""`stepahead hash-key --tenant NAME` prints a table that the config it is appended to
still loads, whatever the name, and refuses (exit 2, one line) a name the config would
refuse: the config's own check (`tenant_name_problem`)."""
from __future__ import annotations

import io
import sys
import tomllib

import pytest

from gateway.cli import main
from gateway.config import load_config

CONFIG = "[[models]]\nname = 'm'\nkind = 'local'\npath = 'tiny'\n"
# whitespace inside: around a name it is refused (QA211 F1), so "\r" and U+2028 stand within these
ODD_NAMES = ["bot\x7f", "a\x00b\x1fc", 'q"uo\\te', "tab\there", "line\nbreak\rend", "café\u2028中", "x\x0c\x08",
             "c1\x9b[31m", "bidi\u202egnp.exe", "\ufeffzero\u200bwidth"]   # QA87: C1 and invisible ones written raw


def test_tables_for_odd_names_load_as_toml_and_as_a_config(monkeypatch, capsys, tmp_path):
    path = tmp_path / "gw.toml"
    text = CONFIG
    for name in ODD_NAMES:
        monkeypatch.setattr(sys, "stdin", io.StringIO(f"sk-{len(text)}\n"))
        assert main(["hash-key", "--tenant", name]) == 0
        text += capsys.readouterr().out
    path.write_text(text, encoding="utf-8")
    assert [table["name"] for table in tomllib.loads(text)["tenants"]] == ODD_NAMES
    assert [tenant.name for tenant in load_config(path).tenants] == ODD_NAMES
    assert not any(char in text for char in "\x9b\u202e\ufeff\u200b")   # escaped, so the file reads as it is


@pytest.mark.parametrize("name, words", [
    ("unauthenticated", "'unauthenticated' is reserved"),
    ("Unauthenticated", "'Unauthenticated' is reserved"),   # QA211 F1: in any letter case
    (" beta", "' beta' begins or ends with whitespace"),
    ("   ", "'   ' is only whitespace"),
    ("", "is required"),
    ("caf\udce9", "is not Unicode text"),   # a Latin-1 byte of argv, as Python decodes it
])
def test_names_the_config_refuses_are_refused_with_exit_2(capsys, name, words):
    assert main(["hash-key", "--generate", "--tenant", name]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith("stepahead: --tenant: a tenant's name ") and words in err
