"""Config values the loader used to take, or refuse in vaguer words, that are almost
surely mistakes: a whitespace-only tenant name, weights or shares for a tenant the config
does not have, `max_queued` without `max_concurrent`, true for an integer limit, an
upstream model's keys without `kind = "upstream"`; and a file saved with a UTF-8 BOM,
which loads."""
from __future__ import annotations

import json

import pytest

from gateway.config import ConfigError, key_digest, load_config, parse_config

TENANT = f'[[tenants]]\nname = "a"\napi_key_sha256 = ["{key_digest("k")}"]\n'
MODEL = '[[models]]\nname = "tiny"\npath = "tiny"\n'


def _data(engine: dict | None = None, tenant: dict | None = None, model: dict | None = None) -> dict:
    return {"models": [model or {"name": "tiny", "path": "tiny", "engine": engine or {}}],
            "tenants": [{"name": "a", "api_key_sha256": [key_digest("k")], **(tenant or {})}]}


def test_a_file_with_a_utf8_bom_loads_and_a_bad_byte_is_placed_in_the_file(tmp_path):
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + (MODEL + TENANT).encode())
    assert [tenant.name for tenant in load_config(path).tenants] == ["a"]
    path.write_bytes(b"\xef\xbb\xbf" + b"# \xff\n" + (MODEL + TENANT).encode())
    with pytest.raises(ConfigError, match="not UTF-8 text \\(invalid start byte at byte 5\\)"):
        load_config(path)


@pytest.mark.parametrize("name", ["   ", "\t", " \n "])
def test_a_tenant_name_of_whitespace_only_is_refused(name):
    with pytest.raises(ConfigError) as raised:
        parse_config(_data(tenant={"name": name}))
    assert str(raised.value) == f"tenants[0].name {name!r} is only whitespace"


@pytest.mark.parametrize("name", ["beta ", " beta", "beta\n", "\tbeta", "beta\u3000", "unauthenticated "])
def test_a_tenant_name_with_whitespace_around_it_is_refused_quoted(tmp_path, name):
    """QA211 F1: `beta ` was a second tenant, printed as `beta`; by a file, as the start
    and a SIGHUP reload read it (`load_config`)."""
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + TENANT.replace('name = "a"', f"name = {json.dumps(name)}"), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == (f"tenants[0].name {name!r} begins or ends with whitespace: remove it (names are "
                                 f"compared exactly, so it would be a tenant apart from {name.strip()!r})")


@pytest.mark.parametrize("name", ["UNAUTHENTICATED", "Unauthenticated", "unAuthenticated"])
def test_the_reserved_name_is_refused_in_any_letter_case(tmp_path, name):
    path = tmp_path / "gw.toml"
    path.write_text(MODEL + TENANT.replace('name = "a"', f'name = "{name}"'), encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == (f"tenants[0].name {name!r} is reserved: the metrics name requests whose key is not "
                                 "checked yet (or failed) so ('unauthenticated', in any letter case)")


def test_names_that_differ_only_in_letter_case_are_two_tenants():
    data = _data()
    data["tenants"].append({"name": "A", "api_key_sha256": [key_digest("k2")]})
    assert [tenant.name for tenant in parse_config(data).tenants] == ["a", "A"]


@pytest.mark.parametrize("engine, good, message", [
    ({"tenant_weights": {"alfa": 2.0}}, {"tenant_weights": {"a": 2.0}},
     "models[0].engine.tenant_weights: no tenant named 'alfa' (tenants: 'a')"),
    ({"policy": "predictive", "policy_options": {"static_shares": {"a": 0.1, "alfa": 0.2}}},
     {"policy": "predictive", "policy_options": {"static_shares": {"a": 0.1}}},
     "models[0].engine.policy_options.static_shares: no tenant named 'alfa' (tenants: 'a')"),
])
def test_engine_tables_naming_a_tenant_the_config_lacks_are_refused(engine, good, message):
    with pytest.raises(ConfigError) as raised:
        parse_config(_data(engine))
    assert str(raised.value) == message
    parse_config(_data(good))


def test_max_queued_without_max_concurrent_is_refused():
    with pytest.raises(ConfigError) as raised:
        parse_config(_data(tenant={"limits": {"max_queued": 8}}))
    assert str(raised.value) == ("tenants[0].limits.max_queued needs max_concurrent: requests queue only for a "
                                 "concurrency slot")
    parse_config(_data(tenant={"limits": {"max_queued": 8, "max_concurrent": 2}}))
    parse_config(_data(tenant={"limits": {"max_queued": 0}}))


@pytest.mark.parametrize("value, word", [(True, "true"), (False, "false")])
def test_a_bool_for_an_integer_limit_says_integer_and_the_value(value, word):
    with pytest.raises(ConfigError) as raised:
        parse_config(_data(tenant={"limits": {"max_concurrent": value}}))
    assert str(raised.value) == f"tenants[0].limits.max_concurrent must be an integer, not {word}"
    with pytest.raises(ConfigError, match=f"tenants\\[0\\].weight must be a number, not {word}"):
        parse_config(_data(tenant={"weight": value}))


@pytest.mark.parametrize("keys, named", [
    ({"litellm_model": "openai/gpt-4o-mini"}, "'litellm_model' is an upstream key"),
    ({"litellm_model": "openai/x", "api_base": "http://h/v1", "passthrough": True},
     "'litellm_model', 'api_base', 'passthrough' are upstream keys"),
])
def test_an_upstream_model_without_kind_is_told_to_set_it(keys, named):
    with pytest.raises(ConfigError) as raised:
        parse_config(_data(model={"name": "u", **keys}))
    assert str(raised.value) == f'models[0]: {named}, but kind is "local" when not given: set kind = "upstream"'
    with pytest.raises(ConfigError, match="unknown key 'litellm_model'"):   # kind given: the plain message
        parse_config(_data(model={"name": "u", "kind": "local", **keys}))
