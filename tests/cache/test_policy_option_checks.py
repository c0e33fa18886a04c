"""Each policy checks its options' type and range where it is built (QA156 F1, F2): a
string, a bool where a number goes, a quoted "false", a negative duration or count, a
NaN, are refused with one message naming `policy_options.<key>`; good values are kept."""
from __future__ import annotations

import dataclasses
import math

import pytest

from cache.policies import POLICY_NAMES, make_policy
from cache.policies.predictive_config import PredictiveConfig


@pytest.mark.parametrize("policy, options, message", [
    # ttl: a string crashed the worker at its first tool-call reply; negatives made it LRU
    ("ttl", {"cold_ttl_s": "abc"}, "policy_options.cold_ttl_s must be a number >= 0 (and finite), not 'abc'"),
    ("ttl", {"cold_ttl_s": -5}, "policy_options.cold_ttl_s must be a number >= 0 (and finite), not -5"),
    ("ttl", {"cold_ttl_s": math.inf}, "policy_options.cold_ttl_s must be a number >= 0 (and finite), not inf"),
    ("ttl", {"max_ttl_s": -1}, "policy_options.max_ttl_s must be a number > 0 (and finite), not -1"),
    ("ttl", {"max_ttl_s": 0}, "policy_options.max_ttl_s must be a number > 0 (and finite), not 0"),
    ("ttl", {"max_ttl_s": True}, "policy_options.max_ttl_s must be a number > 0 (and finite), not True"),
    # predictive
    ("predictive", {"max_pin_s": "x"}, "policy_options.max_pin_s must be a number >= 0 (and finite), not 'x'"),
    ("predictive", {"max_pin_s": -3}, "policy_options.max_pin_s must be a number >= 0 (and finite), not -3"),
    ("predictive", {"prefetch": "false"}, "policy_options.prefetch must be true or false, not 'false'"),
    ("predictive", {"prefetch": 0}, "policy_options.prefetch must be true or false, not 0"),
    ("predictive", {"replan_interval_s": -1},
     "policy_options.replan_interval_s must be a number >= 0 (and finite), not -1"),
    ("predictive", {"accuracy_min_events": -1}, "policy_options.accuracy_min_events must be an integer >= 0, not -1"),
    ("predictive", {"accuracy_min_events": 2.5},
     "policy_options.accuracy_min_events must be an integer >= 0, not 2.5"),
    ("predictive", {"accuracy_min_events": True},
     "policy_options.accuracy_min_events must be an integer >= 0, not True"),
    ("predictive", {"host_to_hot_s_per_block": -1},
     "policy_options.host_to_hot_s_per_block must be a number >= 0 (and finite), not -1"),
    ("predictive", {"pin_cap_frac": 2}, "policy_options.pin_cap_frac must lie in [0, 1] (a number), not 2"),
    ("predictive", {"pin_quantile": "0.9"}, "policy_options.pin_quantile must lie in [0, 1] (a number), not '0.9'"),
    ("predictive", {"fallback_p": math.nan}, "policy_options.fallback_p must lie in [0, 1] (a number), not nan"),
    ("predictive", {"reserve_frac": -0.1}, "policy_options.reserve_frac must lie in [0, 1] (a number), not -0.1"),
    ("predictive", {"horizon_factor": 0}, "policy_options.horizon_factor must be a number > 0 (and finite), not 0"),
    ("predictive", {"rate_half_life_s": 0},
     "policy_options.rate_half_life_s must be a number > 0 (and finite), not 0"),
    ("predictive", {"min_refresh_s": -0.5},
     "policy_options.min_refresh_s must be a number >= 0 (and finite), not -0.5"),
    ("predictive", {"sharing_weight": -1.0},
     "policy_options.sharing_weight must be a number >= 0 (and finite), not -1.0"),
    ("predictive", {"session_idle_forget_s": "1h"},
     "policy_options.session_idle_forget_s must be a number >= 0 (and finite), not '1h'"),
    ("predictive", {"value": "dense"}, "policy_options.value must be one of density, within, not 'dense'"),
    ("predictive", {"static_shares": (("a", 1.5),)},
     "policy_options.static_shares.a must lie in [0, 1] (a number), not 1.5"),
])
def test_a_bad_option_is_refused_where_the_policy_is_built(policy, options, message):
    with pytest.raises(ValueError) as refused:   # what make_policy's callers catch
        make_policy(policy, **options)
    assert str(refused.value) == message
    assert type(refused.value).__name__ == "PolicyOptionError"


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_builds_with_its_defaults(name):
    make_policy(name)


@pytest.mark.parametrize("policy, options", [
    ("ttl", {"cold_ttl_s": 0, "max_ttl_s": 60}),          # TOML integers are numbers; 0: cold tools unpinned
    ("ttl", {"cold_ttl_s": 1e-3, "max_ttl_s": 1e-3}),    # a cold pin as long as the cap (FI66: never longer)
    ("predictive", {"max_pin_s": 0, "prefetch": False, "replan_interval_s": 0, "accuracy_min_events": 0,
                    "host_to_hot_s_per_block": 0, "pin_cap_frac": 1, "fallback_p": 0, "long_weight": 0,
                    "sharing_weight": 0, "prefetch_margin": 0, "value": "within"}),
    ("predictive", {"static_shares": (("a", 0.25), ("b", 0)), "accuracy_margin": 0.5, "rate_half_life_s": 1e12}),
])
def test_edge_values_that_work_are_kept(policy, options):
    built = make_policy(policy, **options)
    held = built.config if policy == "predictive" else built
    assert {key: getattr(held, key) for key in options} == options


def test_every_predictive_field_has_a_rule():
    """A new knob without a rule would be taken unchecked."""
    from cache.policies.predictive_config import OPTION_RULES

    fields = [field.name for field in dataclasses.fields(PredictiveConfig)]
    assert [name for name, _ in OPTION_RULES] == [name for name in fields if name != "static_shares"]


def test_the_defaults_obey_their_rules():
    from cache.policies.option_checks import check_option
    from cache.policies.predictive_config import OPTION_RULES

    defaults = PredictiveConfig()
    for name, rule in OPTION_RULES:
        check_option(name, getattr(defaults, name), rule)


@pytest.mark.parametrize("rule, good, bad", [
    ("POSITIVE", [1e-9, 3, 2.5], [0, -1, math.inf, math.nan, True, "1", None]),
    ("NON_NEGATIVE", [0, 0.0, 7], [-1e-9, -math.inf, math.inf, False, "0"]),
    ("FRACTION", [0, 0.5, 1, 1.0], [-0.01, 1.01, math.nan, True, "0.5"]),
    ("COUNT_RULE", [0, 30, 10**400], [-1, -10**400, 1.0, 30.5, True, "3"]),   # no OverflowError
    ("FLAG_RULE", [True, False], [0, 1, "true", "false", None]),
])
def test_rules_known_answers(rule, good, bad):
    from cache.policies import option_checks
    from cache.policies.option_checks import PolicyOptionError, check_option

    rule = getattr(option_checks, rule)
    for value in good:
        check_option("k", value, rule)
    for value in bad:
        with pytest.raises(PolicyOptionError, match=r"^policy_options\.k must "):
            check_option("k", value, rule)
