"""A knob a policy does not take is one line naming `policy_options.<knob>` (QA192 F2).

Known failure: the constructor's TypeError came through as the message,
`PredictiveConfig.__init__() got an unexpected keyword argument 'foo'`, with no
`policy_options.` name, no suggestion and no list of the knobs there are.
"""
from __future__ import annotations

import dataclasses

import pytest

from cache.policies import make_policy
from cache.policies.predictive_config import PredictiveConfig

PREDICTIVE_KNOWN = ", ".join(sorted(f.name for f in dataclasses.fields(PredictiveConfig)))


@pytest.mark.parametrize("policy, knobs, message", [
    ("predictive", {"pin_cap_frak": 0.2}, "bad predictive policy option: unknown knob policy_options.pin_cap_frak; "
                                          f"did you mean 'pin_cap_frac'? (known: {PREDICTIVE_KNOWN})"),
    ("predictive", {"foo": 1},
     f"bad predictive policy option: unknown knob policy_options.foo (known: {PREDICTIVE_KNOWN})"),
    ("predictive", {"prefetch": True, "cold_ttl_s": 5.0},   # a knob of the other policy says so
     "bad predictive policy option: unknown knob policy_options.cold_ttl_s; that is a knob of policy 'ttl' "
     f"(known: {PREDICTIVE_KNOWN})"),
    ("ttl", {"max_ttl": 60}, "bad ttl policy option: unknown knob policy_options.max_ttl; did you mean 'max_ttl_s'? "
                             "(known: cold_ttl_s, max_ttl_s)"),
    ("ttl", {"foo": 1}, "bad ttl policy option: unknown knob policy_options.foo (known: cold_ttl_s, max_ttl_s)"),
    ("ttl", {"a\nb\x1b[2J": 1},   # a quoted TOML key: escaped, one line (QA198 F1)
     "bad ttl policy option: unknown knob policy_options['a\\nb\\x1b[2J'] (known: cold_ttl_s, max_ttl_s)"),
    ("ttl", {"pin_cap_frac": 0.2}, "bad ttl policy option: unknown knob policy_options.pin_cap_frac; that is a knob "
                                   "of policy 'predictive' (known: cold_ttl_s, max_ttl_s)"),
])
def test_an_unknown_knob_is_named_with_a_suggestion_and_the_known_ones(policy, knobs, message):
    with pytest.raises(ValueError) as raised:
        make_policy(policy, **knobs)
    assert str(raised.value) == message and "\n" not in message


def test_every_known_knob_is_taken_and_the_lists_are_the_constructors():
    """The lists the message gives are exactly what the policies accept (each knob at its
    default builds the policy)."""
    from cache.policies import POLICY_KNOBS   # new with the check: imported here so the test above runs on the old code

    assert POLICY_KNOBS["ttl"] == {"cold_ttl_s", "max_ttl_s"}
    assert POLICY_KNOBS["predictive"] == {f.name for f in dataclasses.fields(PredictiveConfig)}
    defaults = PredictiveConfig()
    for knob in POLICY_KNOBS["predictive"]:
        make_policy("predictive", **{knob: getattr(defaults, knob)})
    make_policy("ttl", cold_ttl_s=1.0, max_ttl_s=10.0)
