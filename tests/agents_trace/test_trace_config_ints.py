"""`[tracing]` numbers no setting can use (QA157 F2): an integer past TOML's 64 bits is
refused as every other table refuses it (one check, `toml_int_problem`), a float that is
not finite too, and the export timeout has a ceiling; the same goes for the standard
variables that stand in for the file's keys. Before, `otlp_max_queue_size =
99999999999999999999` was an OverflowError traceback at the start (exit 3)."""
from __future__ import annotations

import pytest

from agents_trace.config import TraceConfig, TraceConfigError, parse_trace_config
from gateway.config import ConfigError, load_config
from gateway.config_values import take

HUGE = 99999999999999999999
TOML_INT_MAX = 2**63 - 1
A_DAY_S = 86_400
INTS = ("otlp_max_queue_size", "otlp_attribute_max_length", "retention_max_bytes", "max_sessions", "queue_size")
FLOATS = ("otlp_export_timeout_s", "retention_max_age_s", "retention_interval_s", "session_idle_timeout_s")
MODEL = ('[[models]]\nname = "mock"\nkind = "upstream"\nlitellm_model = "openai/gpt-4o-mini"\n'
         'litellm_params = { mock_response = "hi" }\n')
TENANT = '[[tenants]]\nname = "t"\napi_key_sha256 = ["' + "0" * 64 + '"]\n'


@pytest.mark.parametrize("key", INTS + FLOATS)
@pytest.mark.parametrize("value", [HUGE, -HUGE, TOML_INT_MAX + 1])
def test_an_integer_past_64_bits_is_refused_naming_the_key(key, value):
    with pytest.raises(TraceConfigError) as raised:
        parse_trace_config({key: value})
    assert str(raised.value) == f"tracing.{key} is past TOML's 64-bit integer range: {value}"


def test_the_message_is_the_other_tables_own():
    with pytest.raises(ConfigError) as server:
        take({"port": HUGE}, "port", int, "server")
    with pytest.raises(TraceConfigError) as tracing:
        parse_trace_config({"queue_size": HUGE})
    assert str(tracing.value) == str(server.value).replace("server.port", "tracing.queue_size")


def test_the_largest_64_bit_integer_is_still_a_size():
    assert parse_trace_config({"queue_size": TOML_INT_MAX}).queue_size == TOML_INT_MAX


@pytest.mark.parametrize("key", FLOATS)
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_a_number_that_is_not_finite_is_refused(key, value):
    with pytest.raises(TraceConfigError, match=rf"^tracing\.{key} must be a finite number, not "):
        parse_trace_config({key: value})


@pytest.mark.parametrize("key", INTS)
@pytest.mark.parametrize("value", [0, -1])
def test_sizes_below_one_stay_refused(key, value):
    with pytest.raises(TraceConfigError, match=rf"^tracing\.{key} must be >= 1$"):
        parse_trace_config({key: value})


def test_an_export_timeout_past_a_day_is_refused():
    # 1e300 s was taken, then every export failed ("timestamp out of range for platform time_t")
    assert parse_trace_config({"otlp_export_timeout_s": A_DAY_S}).otlp_export_timeout_s == A_DAY_S
    for value in (A_DAY_S + 1, 1e300):
        with pytest.raises(TraceConfigError, match=r"^tracing\.otlp_export_timeout_s must be at most 86400 "):
            parse_trace_config({"otlp_export_timeout_s": value})


@pytest.mark.parametrize("name, value", [
    ("OTEL_BSP_MAX_QUEUE_SIZE", str(HUGE)),
    ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", str(HUGE)),
    ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", str(HUGE)),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "inf"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "1e300"),
])
def test_the_standard_variables_have_the_same_bounds(name, value):
    environ = {name: value}
    with pytest.raises(TraceConfigError, match=rf"^{name} must be at most "):
        config = TraceConfig()
        config.resolved_otlp_export_timeout_s(environ)
        config.resolved_otlp_max_export_batch_size(environ)
        config.resolved_otlp_attribute_max_length(environ)


def test_the_config_file_is_a_bad_config_not_a_crash_at_the_start(tmp_path):
    path = tmp_path / "big.toml"
    path.write_text('[tracing]\notlp_endpoint = "http://127.0.0.1:9"\n'
                    f"otlp_max_queue_size = {HUGE}\n" + MODEL + TENANT)
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    assert str(raised.value) == f"tracing.otlp_max_queue_size is past TOML's 64-bit integer range: {HUGE}"


def test_serve_says_bad_config_and_exits_2_before_binding(tmp_path, monkeypatch, capsys):
    import gateway.serve_command as serve_command
    from gateway.cli import main

    # a start that got this far would bind and serve: say so instead of binding anything
    monkeypatch.setattr(serve_command, "address_problem", lambda host, port: "got past the config check")
    path = tmp_path / "big.toml"
    path.write_text(f'[tracing]\notlp_endpoint = "http://127.0.0.1:9"\notlp_max_queue_size = {HUGE}\n'
                    + MODEL + TENANT)
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == ("stepahead: bad config: tracing.otlp_max_queue_size is past TOML's "
                                       f"64-bit integer range: {HUGE}\n")
