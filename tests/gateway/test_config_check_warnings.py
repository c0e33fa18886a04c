"""QA199 F6, F7: `stepahead config check` marks what fails nothing as `stepahead: warning:`
(`--json` keeps it in "warnings"), tells the start's kv_share-ignored warning as the start
makes it (`with_tenant_shares`), and no config message shows a key pasted where the name of
its environment variable goes (`api_key_env`), nor one in place of its digest."""
from __future__ import annotations

import json
import socket

import pytest

from gateway.cli import main
from gateway.config import ConfigError, key_digest, load_config
from gateway.tenant_shares import kv_share_ignored
from tests.gateway.serving import free_port

PASTED_KEY = "sk-gamma-SECRET3xyz"
TINY = '[[models]]\nname = "tiny"\nkind = "local"\npath = "tiny"\nnum_workers = 1\n'
TENANT = f'\n[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("sk-a")}"]\n'


def _file(tmp_path, text: str, port: int | None = None) -> str:
    path = tmp_path / "gw.toml"
    path.write_text(f"[server]\nport = {free_port() if port is None else port}\n" + text)
    return str(path)


def _check(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(["config", "check", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("entry", [f'"{PASTED_KEY}"', f'["F6_SET_KEY", "{PASTED_KEY}"]'])
def test_a_key_in_place_of_its_variables_name_is_not_shown(tmp_path, monkeypatch, capsys, entry):
    monkeypatch.setenv("F6_SET_KEY", "sk-set-key-value")
    path = _file(tmp_path, TINY + TENANT + f'\n[[tenants]]\nname = "gamma"\napi_key_env = {entry}\n')
    with pytest.raises(ConfigError) as failed:
        load_config(path)   # the start's and the reload's message
    assert str(failed.value) == ("tenants[1].api_key_env: an entry looks like an API key itself (not shown): "
                                 "api_key_env takes the names of environment variables holding keys")
    status, out, err = _check(capsys, path)
    assert (status, out) == (2, "") and err == f"stepahead: bad config: {failed.value}\n"
    status, out, _ = _check(capsys, path, "--json")
    assert status == 2 and PASTED_KEY not in out and "SECRET3" not in out


@pytest.mark.parametrize("key", ["api_key_env", "api_key_sha256"])
def test_a_wrong_typed_key_list_is_not_shown_when_it_holds_a_key(tmp_path, key):
    path = _file(tmp_path, TINY + f'\n[[tenants]]\nname = "a"\n{key} = ["{PASTED_KEY}", 3]\n')
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert str(failed.value) == (f"tenants[0].{key} must be a string or a list of strings (its value is not "
                                 "shown: an entry looks like an API key)")


def test_an_unset_variables_name_is_still_named(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("F6_UNSET_KEY", raising=False)
    path = _file(tmp_path, TINY + '\n[[tenants]]\nname = "a"\napi_key_env = ["F6_UNSET_KEY"]\n')
    assert _check(capsys, path) == (2, "", "stepahead: bad config: tenants[0]: environment variable F6_UNSET_KEY "
                                           "is not set\n")
    path = _file(tmp_path, TINY + '\n[[tenants]]\nname = "a"\napi_key_env = ["F6_UNSET_KEY", 3]\n')
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert str(failed.value).endswith("api_key_env must be a string or a list of strings, not ['F6_UNSET_KEY', 3]")


def test_a_warning_is_marked_apart_from_an_error(tmp_path, capsys):
    """QA199 F7's repro: the address in use (a warning) beside a bad engine option (an error)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        path = _file(tmp_path, TINY + '[models.engine]\npolicy = "lur"\n' + TENANT, port)
        status, out, err = _check(capsys, path)
        json_status, json_out, _ = _check(capsys, path, "--json")
    address = (f"cannot listen on 127.0.0.1:{port}: Address already in use now: the start fails while something "
               "holds it (a gateway serving there must stop first)")
    error = "cannot serve model 'tiny': engine option policy must be one of lru, predictive, ttl, kvflow, not 'lur'"
    assert (status, out) == (2, "")
    assert err == f"stepahead: warning: {address}\nstepahead: {error}\n"
    reply = json.loads(json_out)
    assert (json_status, reply["ok"], reply["errors"], reply["warnings"]) == (2, False, [error], [address])


def test_the_starts_kv_share_ignored_warning_is_a_warning_of_the_check(tmp_path, capsys):
    path = _file(tmp_path, TINY + '[models.engine]\npolicy = "lru"\n' + TENANT + "kv_share = 0.25\n")
    warning = kv_share_ignored("tiny", "lru")   # the start's words (gateway/local.py logs them)
    status, out, err = _check(capsys, path)
    assert (status, err) == (0, f"stepahead: warning: {warning}\n")
    assert out.startswith(f"{path}: ok\n")
    status, out, _ = _check(capsys, path, "--json")
    assert status == 0 and json.loads(out)["warnings"] == [warning]
    predictive = _file(tmp_path, TINY + TENANT + "kv_share = 0.25\n")   # the default policy reserves it
    assert _check(capsys, predictive)[::2] == (0, "")


def _upstream_with(tmp_path, setting: str, value: str):
    """A config file of one upstream model whose `setting` is `value`, and the tenant."""
    return _file(tmp_path, f'[[models]]\nname = "up"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
                           f'{setting} = "{value}"\n' + TENANT)


def _refusal(path) -> str:
    """The ConfigError `load_config` raises for `path`, as text."""
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    return str(failed.value)


def test_an_upstream_models_key_in_place_of_its_variables_name_is_not_shown(tmp_path, capsys):
    """An upstream model's `api_key_env` holding the key itself is refused, unshown, as a
    tenant's is (the start's warning named it: `api_key_env names $sk-...`)."""
    path = _upstream_with(tmp_path, "api_key_env", PASTED_KEY)
    assert _refusal(path) == ("models[0].api_key_env: an entry looks like an API key itself (not shown): "
                              "api_key_env takes the names of environment variables holding keys")
    status, out, err = _check(capsys, path, "--json")
    assert status == 2 and PASTED_KEY not in out + err and "SECRET3" not in out + err


def test_an_upstream_models_key_in_place_of_its_endpoint_variable_is_not_shown(tmp_path):
    """QA203 F6: `api_base_env` holding a key was printed whole in the start's warning."""
    assert _refusal(_upstream_with(tmp_path, "api_base_env", PASTED_KEY)) == (
        "models[0].api_base_env: an entry looks like an API key itself (not shown): "
        "api_base_env takes the name of an environment variable holding the endpoint")


def test_an_empty_key_variable_name_is_said_so(tmp_path):
    """QA203 F8: `api_key_env = ""` said "environment variable  is not set"."""
    path = _file(tmp_path, TINY + '\n[[tenants]]\nname = "a"\napi_key_env = ["  "]\n')
    with pytest.raises(ConfigError) as failed:
        load_config(path)
    assert str(failed.value) == ("tenants[0].api_key_env: an entry is empty: api_key_env takes the names of "
                                 "environment variables holding keys")


def test_tenant_names_that_differ_only_in_letter_case_are_a_warning_naming_them_quoted(tmp_path, capsys):
    """QA211 F1: `beta` and `Beta` stay two tenants (names are case-sensitive), but the
    check says so."""
    tenants = "".join(f'\n[[tenants]]\nname = "{name}"\napi_key_sha256 = ["{key_digest("sk-" + name)}"]\n'
                      for name in ("beta", "a", "Beta", "BETA"))
    path = _file(tmp_path, TINY + tenants)
    warning = ("tenants 'beta', 'Beta' and 'BETA' differ only in letter case: they are separate tenants (names are "
               "case-sensitive), each with its own keys, limits and data")
    status, out, err = _check(capsys, path)
    assert (status, err) == (0, f"stepahead: warning: {warning}\n")
    assert out.startswith(f"{path}: ok\n")
    status, out, _ = _check(capsys, path, "--json")
    assert status == 0 and json.loads(out)["warnings"] == [warning]
    assert _check(capsys, _file(tmp_path, TINY + TENANT))[::2] == (0, "")   # none alike: no warning
