"""`policy_options` are checked against the policy they go to, and `threads_per_worker`
is bounded, before anything starts (`LocalEngine.check_options`, which `stepahead serve`'s
pre-start check and a reload's run): a wrong knob is one EngineOptionError line, not a
worker's traceback after the model loaded."""
from __future__ import annotations

import pytest

from gateway.config import key_digest, parse_config
from gateway.serve_command import local_model_problem
from shards.engine import LocalEngine
from shards.engine_options import EngineOptionError


@pytest.mark.parametrize("options, message", [
    ({"policy": "predictive", "policy_options": {"bogus_option": 1}},
     "policy_options does not suit policy 'predictive': bad predictive policy option: unknown knob policy_options.bogus_option"),
    ({"policy": "predictive", "policy_options": {"pin_cap_frac": 5}}, "pin_cap_frac must lie in \\[0, 1\\]"),
    ({"policy": "lru", "policy_options": {"pin_cap_frac": 0.2}},
     "policy_options does not suit policy 'lru': lru takes no options, got \\['pin_cap_frac'\\]"),
    ({"policy": "kvflow", "policy_options": {"x": 1}}, "kvflow takes no options"),
    ({"policy": "ttl", "policy_options": {"hot_ttl_s": 1.0}}, "bad ttl policy option"),
    ({"policy": "predictive", "policy_options": {"static_shares": {"a": 0.6, "b": 0.6}}},
     "static shares must be non-negative and sum to at most 1"),
    ({"threads_per_worker": 10**12}, "threads_per_worker must be at most 1024, not 1000000000000"),
    ({"threads_per_worker": 1025}, "threads_per_worker must be at most 1024"),
])
def test_options_the_policy_or_torch_would_refuse_are_refused_before_the_start(options, message):
    with pytest.raises(EngineOptionError, match=message) as raised:
        LocalEngine.check_options(options)
    assert "\n" not in str(raised.value)


def test_options_the_policy_takes_pass():
    for options in ({"policy": "predictive", "policy_options": {"pin_cap_frac": 0.2, "value": "within",
                                                                "static_shares": {"a": 0.25}}},
                    {"policy": "ttl", "policy_options": {"cold_ttl_s": 2.0, "max_ttl_s": 60}},
                    {"policy": "lru", "policy_options": {}}, {"policy": "kvflow"},
                    {"threads_per_worker": 1024}, {"threads_per_worker": 1}):
        LocalEngine.check_options(options)


def _config(engine: dict):
    return parse_config({"models": [{"name": "tiny", "path": "tiny", "num_workers": 1, "engine": engine}],
                         "tenants": [{"name": "a", "api_key_sha256": [key_digest("k")]}]})


def test_the_pre_start_check_judges_options_by_the_policy_the_gateway_runs():
    """A model naming no policy runs the gateway's default, predictive: its knobs pass,
    a typo among them is refused; under a named lru they are refused."""
    assert local_model_problem(_config({"policy_options": {"pin_cap_frac": 0.2}})) is None
    assert local_model_problem(_config({"policy_options": {"pin_cap_frak": 0.2}})).startswith(
        "cannot serve model 'tiny': engine option policy_options does not suit policy 'predictive': bad "
        "predictive policy option: unknown knob policy_options.pin_cap_frak; did you mean 'pin_cap_frac'? (known: ")
    assert local_model_problem(_config({"policy": "lru", "policy_options": {"pin_cap_frac": 0.2}})) == (
        "cannot serve model 'tiny': engine option policy_options does not suit policy 'lru': lru takes no "
        "options, got ['pin_cap_frac']")
