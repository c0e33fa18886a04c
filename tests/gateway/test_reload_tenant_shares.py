"""A reload puts tenants' weights and kv_shares in force on the local models' engines, and
warns of those the `[models.engine]` table fixes only where the start would."""
from __future__ import annotations

import asyncio
import logging

from gateway.app import build_app
from gateway.config import load_config
from gateway.reload import reload_tenants
from tests.gateway.test_reload import LOCAL, _tenant


def test_a_reload_puts_new_weights_and_kv_shares_in_force_on_the_local_engines(tmp_path, capsys):
    path = tmp_path / "gw.toml"
    path.write_text(LOCAL + 'policy = "predictive"\n' + _tenant("a", "sk-a") + _tenant("b", "sk-b", "kv_share = 0.2"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    engine = state.backends["tiny"].engine
    assert engine.tenant_shares() == ({"a": 1.0, "b": 1.0}, {"b": 0.2})
    path.write_text(LOCAL + 'policy = "predictive"\n' + _tenant("a", "sk-a", "weight = 3.0\nkv_share = 0.5")
                    + _tenant("b", "sk-b"))
    report = asyncio.run(reload_tenants(state, path))
    assert report.shares_applied_to == ("tiny",) and report.at_next_start == ()
    assert engine.tenant_shares() == ({"a": 3.0, "b": 1.0}, {"a": 0.5})
    assert capsys.readouterr().err.strip().endswith(": 0 added, 0 removed, 2 changed (a, b); weights and kv_shares "
                                                    "in force on 'tiny'")
    path.write_text(LOCAL + 'policy = "predictive"\n' + _tenant("a", "sk-a", "weight = 3.0"))
    asyncio.run(reload_tenants(state, path))
    assert engine.tenant_shares() == ({"a": 3.0}, None)   # no shares left: planned from demand again
    path.write_text(LOCAL + 'policy = "predictive"\n' + _tenant("a", "sk-a", "weight = 3.0") + _tenant("c", "sk-c"))
    asyncio.run(reload_tenants(state, path))
    assert engine.tenant_shares() == ({"a": 3.0, "c": 1.0}, None)   # a tenant added at the default weight too


def test_a_reload_leaves_what_the_models_engine_table_fixes_and_says_so(tmp_path, caplog):
    path = tmp_path / "gw.toml"
    fixed = LOCAL + 'policy = "lru"\ntenant_weights = { a = 5.0 }\n'
    path.write_text(fixed + _tenant("a", "sk-a"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    engine = state.backends["tiny"].engine
    path.write_text(fixed + _tenant("a", "sk-a", "weight = 2.0\nkv_share = 0.5"))
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        report = asyncio.run(reload_tenants(state, path))
    assert report.shares_applied_to == ()   # neither took effect: the reload line says none in force (QA204 F2)
    assert engine.tenant_shares() == ({"a": 5.0}, None)
    assert [record.getMessage() for record in caplog.records] == [
        "stepahead: model 'tiny': tenants' weight is ignored ([models.engine] sets tenant_weights)",
        "stepahead: model 'tiny': tenants' kv_share is ignored under policy 'lru' (reservations need "
        'policy = "predictive" in [models.engine])']


def test_a_reload_warns_of_an_ignored_weight_or_kv_share_only_where_the_start_would(tmp_path, caplog):
    """QA225 F3: with `tenant_weights` set, adding or removing a tenant that sets no
    weight warned "tenants' weight is ignored", which the start never says then."""
    path = tmp_path / "gw.toml"
    fixed = (LOCAL + 'policy = "predictive"\ntenant_weights = { a = 5.0 }\n'
             'policy_options = { static_shares = { a = 0.5 } }\n')
    path.write_text(fixed + _tenant("a", "sk-a") + _tenant("gone", "sk-gone", "kv_share = 0.2"))
    state = build_app(load_config(path), config_path=str(path)).state.gateway
    engine = state.backends["tiny"].engine
    shares = engine.tenant_shares()
    assert caplog.messages == ["stepahead: model 'tiny': tenants' kv_share is ignored ([models.engine] policy_options "
                               "sets static_shares)"]   # the start's, for tenant "gone"'s
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stepahead"):
        for tenants in (_tenant("a", "sk-a") + _tenant("b", "sk-b"),   # one added, one (with a kv_share) removed
                        _tenant("a", "sk-a")):   # one removed
            path.write_text(fixed + tenants)
            report = asyncio.run(reload_tenants(state, path))
            assert report.shares_applied_to == ()   # nothing changed on the engine: not "in force"
        assert caplog.messages == []
        path.write_text(fixed + _tenant("a", "sk-a") + _tenant("b", "sk-b", "weight = 2.0"))
        asyncio.run(reload_tenants(state, path))
    assert [record.getMessage() for record in caplog.records] == [
        "stepahead: model 'tiny': tenants' weight is ignored ([models.engine] sets tenant_weights)"]
    assert engine.tenant_shares() == shares
