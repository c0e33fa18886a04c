"""Engine tables given as plain values, and number options that cannot work (zero where
only a positive value works, NaN, inf), are refused by the option check, and the tables
already by the config's parser: one `bad config` line at a start and at a reload."""
from __future__ import annotations

import math

import pytest

from gateway.config import ConfigError, key_digest, load_config, parse_config
from shards.engine import LocalEngine
from shards.engine_options import EngineOptionError, check_engine_tables


def _config(engine: dict) -> dict:
    return {"models": [{"name": "tiny", "path": "tiny", "num_workers": 1, "engine": engine}],
            "tenants": [{"name": "a", "api_key_sha256": [key_digest("k")]},
                        {"name": "b", "api_key_sha256": [key_digest("k2")]}]}   # the tenants the tables name


BAD_TABLES = [
    ({"transport_options": "spawn"}, "transport_options must be a table, not 'spawn'"),
    ({"transport_options": 5}, "transport_options must be a table, not 5"),
    ({"transport_options": ["spawn"]}, "transport_options must be a table"),
    ({"transport_options": {"start_method": ["spawn"]}}, "transport_options.start_method must be a string"),
    ({"transport": "ray", "transport_options": {"address": {"x": 1}}}, "transport_options.address must be"),
    ({"tenant_weights": "x"}, "tenant_weights must be a table, not 'x'"),
    ({"tenant_weights": {"a": "heavy"}}, "tenant_weights.a must be a finite number > 0"),
    ({"tenant_weights": {"a": 0}}, "tenant_weights.a must be a finite number > 0"),
    ({"tenant_weights": {"a": math.nan}}, "tenant_weights.a must be a finite number > 0"),
    ({"tenant_weights": {"a": True}}, "tenant_weights.a must be a finite number > 0"),
    ({"policy_options": 3}, "policy_options must be a table, not 3"),
    ({"policy": "predictive", "policy_options": {"static_shares": 0.5}}, "static_shares must be a table"),
    ({"policy": "predictive", "policy_options": {"static_shares": {"a": 2}}},
     "static_shares.a must be a number in \\[0, 1\\]"),
    ({"policy": "ttl", "policy_options": {"cold_ttl_s": {"x": 1}}}, "policy_options.cold_ttl_s must be"),
    ({"policy": "ttl", "policy_options": {"cold_ttl_s": math.inf}}, "policy_options.cold_ttl_s must be"),
]


@pytest.mark.parametrize("engine, message", BAD_TABLES)
def test_a_bad_engine_table_is_a_bad_config_at_parse_time(engine, message):
    with pytest.raises(ConfigError, match=message) as raised:
        parse_config(_config(engine))
    assert str(raised.value).startswith("models[0].engine: engine option ")


@pytest.mark.parametrize("engine, message", BAD_TABLES)
def test_the_engine_check_refuses_bad_tables_too(engine, message):
    with pytest.raises(EngineOptionError, match=message):
        LocalEngine.check_options(engine)


def test_a_bad_engine_table_in_a_file_is_one_config_error(tmp_path):
    """What a start and a SIGHUP read (`load_config`; both report a ConfigError in one line)."""
    path = tmp_path / "gw.toml"
    path.write_text('[[models]]\nname = "tiny"\npath = "tiny"\n[models.engine]\ntransport_options = 5\n'
                    '[[tenants]]\nname = "a"\napi_key_sha256 = ["' + key_digest("k") + '"]\n')
    with pytest.raises(ConfigError, match="models\\[0\\].engine: engine option transport_options must be a table"):
        load_config(path)


def test_good_engine_tables_pass():
    for engine in ({"transport_options": {"start_method": "spawn"}},
                   {"transport": "ray", "transport_options": {"address": "auto", "num_cpus_per_worker": 1.5}},
                   {"tenant_weights": {"a": 2, "b": 0.5}},
                   {"policy": "predictive", "policy_options": {"static_shares": {"a": 0.25}, "value": "within",
                                                               "prefetch": False, "accuracy_min_events": 10}},
                   {"policy": "ttl", "policy_options": {"cold_ttl_s": 2.0}}):
        check_engine_tables(engine)
        LocalEngine.check_options(engine)
        parse_config(_config(engine))


@pytest.mark.parametrize("options, message", [
    ({"health_timeout_s": 0}, "health_timeout_s must be a number > 0"),
    ({"ping_interval_s": 0}, "ping_interval_s must be a number > 0"),
    ({"ping_interval_s": 0.0}, "ping_interval_s must be a number > 0"),
    ({"health_timeout_s": math.inf}, "health_timeout_s must be a number > 0 \\(and finite\\), not inf"),
    ({"max_decode_stall_s": math.nan}, "max_decode_stall_s must be a number >= 0 \\(and finite\\), not nan"),
    ({"max_queue_wait_s": math.inf}, "max_queue_wait_s must be a number >= 0"),
    ({"imbalance_threshold_tokens": -math.inf}, "imbalance_threshold_tokens must be a number >= 0"),
    ({"min_p_return": math.nan}, "min_p_return must be a number >= 0"),
    ({"health_timeout_s": 0.5}, "health_timeout_s \\(0.5\\) must be longer than ping_interval_s \\(0.5\\)"),
    ({"health_timeout_s": 2, "ping_interval_s": 5}, "must be longer than ping_interval_s \\(5\\)"),
])
def test_number_options_that_cannot_work_are_refused(options, message):
    with pytest.raises(EngineOptionError, match=message):
        LocalEngine.check_options(options)


def test_zero_where_it_means_something_still_passes():
    LocalEngine.check_options({"max_queue_wait_s": 0, "imbalance_threshold_tokens": 0, "min_p_return": 0,
                               "max_decode_stall_s": 0, "health_timeout_s": 0.2, "ping_interval_s": 0.05})


def test_a_start_reports_a_nan_option_as_a_model_it_cannot_serve():
    from gateway.serve_command import local_model_problem

    problem = local_model_problem(parse_config(_config({"max_decode_stall_s": math.nan})))
    assert problem is not None and problem.startswith("cannot serve model 'tiny': engine option max_decode_stall_s")


def test_checking_a_ray_transport_table_does_not_import_torch():
    """A reload whose file names `transport = "ray"` is checked in the gateway's process, which
    never imports torch with forked CPU workers (QA123: 11 s and +280 MB for that check)."""
    import subprocess
    import sys

    code = ("import sys; from shards.engine_options import check_engine_options; "
            "check_engine_options({'transport': 'ray', 'transport_options': {'address': 'auto'}}, "
            "('transport', 'transport_options')); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
