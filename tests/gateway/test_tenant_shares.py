"""Tenants' weight and kv_share into a local model's engine options (known answers); the
reload side runs on real engines in test_reload.py."""
from __future__ import annotations

from gateway.tenant_shares import FixedByEngineOptions, with_tenant_shares

WEIGHTS, SHARES = {"a": 2.0, "b": 1.0}, {"a": 0.25, "b": 0.0}


def test_the_tenants_values_go_where_the_engine_options_leave_them_open():
    options = {"policy": "predictive", "policy_options": {"reserve_frac": 0.5}}
    fixed, notes = with_tenant_shares(options, WEIGHTS, SHARES, "m")
    assert fixed == FixedByEngineOptions(weight=False, kv_share=False) and notes == []
    assert options == {"policy": "predictive", "tenant_weights": WEIGHTS,
                       "policy_options": {"reserve_frac": 0.5, "static_shares": {"a": 0.25}}}   # no 0 shares


def test_engine_options_win_and_a_policy_without_reservations_ignores_shares_saying_so():
    options = {"policy": "predictive", "tenant_weights": {"a": 9.0},
               "policy_options": {"static_shares": {"b": 0.5}}}
    fixed, notes = with_tenant_shares(options, WEIGHTS, SHARES, "m")
    assert fixed == FixedByEngineOptions(weight=True, kv_share=True)
    assert notes == ["model 'm': tenants' weight is ignored ([models.engine] sets tenant_weights)",   # QA204 F2
                     "model 'm': tenants' kv_share is ignored ([models.engine] policy_options sets static_shares)"]
    assert options["tenant_weights"] == {"a": 9.0} and options["policy_options"] == {"static_shares": {"b": 0.5}}
    unset = {"policy": "predictive", "tenant_weights": {"a": 9.0}, "policy_options": {"static_shares": {"b": 0.5}}}
    assert with_tenant_shares(unset, {"a": 1.0}, {"a": 0.0}, "m")[1] == []   # the tenants set neither
    lru = {"policy": "lru"}
    _, notes = with_tenant_shares(lru, {}, SHARES, "m")
    assert lru == {"policy": "lru"} and notes == [
        "model 'm': tenants' kv_share is ignored under policy 'lru' (reservations need policy = \"predictive\" "
        "in [models.engine])"]
    assert with_tenant_shares({"policy": "lru"}, {}, {"a": 0.0}, "m")[1] == []   # no share asked: nothing to say
