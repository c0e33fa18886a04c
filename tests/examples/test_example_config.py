"""examples/stepahead.toml runs as its own first lines say: the command there sets every
variable a tenant's `api_key_env` names (a start refuses one that is not set), and
docs/serving.md gives the same command."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gateway.config import ConfigError, key_digest, load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "stepahead.toml"
COMMAND = re.compile(r"^#\s+((?:[A-Z_]+=\S+ )+)stepahead serve --config examples/stepahead.toml$", re.M)


def _the_command() -> tuple[str, dict[str, str]]:
    """The command the example's header gives, and the variables it sets."""
    [match] = COMMAND.finditer(EXAMPLE.read_text())
    variables = dict(part.split("=", 1) for part in match.group(1).split())
    return match.group(0).lstrip("# "), variables


def test_the_headers_command_sets_every_tenant_key_variable_and_then_it_loads(monkeypatch):
    command, variables = _the_command()
    tables = tomllib.loads(EXAMPLE.read_text())["tenants"]
    needed = {name for table in tables for name in table.get("api_key_env", ())}
    assert needed and needed == set(variables)
    for name in needed:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="is not set"):   # what the header warns of
        load_config(EXAMPLE)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config = load_config(EXAMPLE)
    assert {digest for tenant in config.tenants for digest in tenant.key_digests} >= {
        key_digest(value) for value in variables.values()} | {key_digest("test")}   # "test": as the header says


def test_serving_md_gives_the_example_with_the_same_command():
    command, _ = _the_command()
    assert f"`{command}`" in (ROOT / "docs" / "serving.md").read_text()


def test_serving_md_names_every_key_the_example_uses():
    """QA219 F5: each key examples/stepahead.toml sets or shows commented out occurs in
    docs/serving.md, explained there or with a pointer to the doc that explains it."""
    keys = set(re.findall(r"^#?\s*([a-z_][a-z0-9_]*)\s*=", EXAMPLE.read_text(), re.M))
    serving = (ROOT / "docs" / "serving.md").read_text()
    assert len(keys) > 20
    assert sorted(key for key in keys if not re.search(rf"\b{key}\b", serving)) == []
