"""Policy options that bound one another are checked against each other where the policy
is built, as a single bad knob is (FI66): the ttl policy took `cold_ttl_s` above
`max_ttl_s` (a cold tool was then pinned past the cap every other pin has), and the
predictive policy a `prefetch_quantile` above `prefetch_until_quantile` (no window to
look at a prefetch in). Both are refused in one message naming both keys: by
`make_policy`, so at `stepahead serve` (exit 2) and at a SIGHUP reload (changes nothing;
both in tests/gateway/test_policy_options_refused.py).
Pairs in order, or equal, are kept; options no other bounds stay free
(`default_horizon_s` below `min_horizon_s` is a short start, not a contradiction)."""
from __future__ import annotations

import pytest

from cache.policies import make_policy

TTL_PAIR = ("policy_options.cold_ttl_s must be at most policy_options.max_ttl_s (every pin is capped there), "
            "not {} > {}")
PREFETCH_PAIR = ("policy_options.prefetch_quantile must be at most policy_options.prefetch_until_quantile "
                 "(a prefetch is looked at from the one until the other), not {} > {}")


@pytest.mark.parametrize("policy, options, message", [
    ("ttl", {"cold_ttl_s": 900, "max_ttl_s": 600}, TTL_PAIR.format(900, 600)),
    ("ttl", {"cold_ttl_s": 2.5, "max_ttl_s": 1e-3}, TTL_PAIR.format(2.5, 0.001)),
    ("ttl", {"cold_ttl_s": 601.0}, TTL_PAIR.format(601.0, 600.0)),   # against the default cap (600)
    ("predictive", {"prefetch_quantile": 0.95}, PREFETCH_PAIR.format(0.95, 0.9)),
    ("predictive", {"prefetch_quantile": 0.5, "prefetch_until_quantile": 0.25}, PREFETCH_PAIR.format(0.5, 0.25)),
])
def test_a_contradictory_pair_is_refused_naming_both_keys(policy, options, message):
    with pytest.raises(ValueError) as refused:   # what make_policy's callers catch
        make_policy(policy, **options)
    assert str(refused.value) == message
    assert type(refused.value).__name__ == "PolicyOptionError"


def test_a_cap_below_the_default_cold_pin_takes_the_cold_pin_down_with_it():
    assert make_policy("ttl", max_ttl_s=3).cold_ttl_s == 3   # unset cold_ttl_s: 5 s, or the cap when less
    assert make_policy("ttl", max_ttl_s=30).cold_ttl_s == 5.0


def test_a_bad_single_knob_is_named_before_its_pair():
    with pytest.raises(ValueError, match=r"^policy_options\.max_ttl_s must be a number > 0"):
        make_policy("ttl", cold_ttl_s=5, max_ttl_s=-1)


@pytest.mark.parametrize("policy, options", [
    ("ttl", {"cold_ttl_s": 600, "max_ttl_s": 600}),
    ("ttl", {"cold_ttl_s": 0, "max_ttl_s": 1e-3}),
    ("ttl", {"cold_ttl_s": 1e-3, "max_ttl_s": 1e-3}),
    ("predictive", {"prefetch_quantile": 0.9, "prefetch_until_quantile": 0.9}),
    ("predictive", {"prefetch_quantile": 0.0, "prefetch_until_quantile": 1.0}),
    ("predictive", {"default_horizon_s": 0.02, "min_horizon_s": 1.0}),   # as tests/shards uses it
])
def test_pairs_in_order_are_kept(policy, options):
    built = make_policy(policy, **options)
    held = built.config if policy == "predictive" else built
    assert {key: getattr(held, key) for key in options} == options
