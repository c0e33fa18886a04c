"""benchmarks/bench_structured_stream.py against the tiny gateway: both ways answer every
task with a valid object, and the baseline's schema takes the whole-reply path."""
from benchmarks.bench_structured_stream import TASKS, measure, whole_schema
from gateway.schema_keywords import is_steerable
from tests.conftest import TINY_GATEWAY_KEYS


def test_the_baseline_schema_is_the_same_constraint_but_not_steerable():
    for _, schema in TASKS:
        assert is_steerable(schema) and not is_steerable(whole_schema(schema))


def test_measure_compares_checked_and_whole_replies_on_the_tiny_model(tiny_gateway):
    result = measure(f"{tiny_gateway.base_url}/v1", TINY_GATEWAY_KEYS["tenant0"], "tiny", 1, 32)
    for way in ("checked", "whole"):
        assert result[way]["num_replies"] == len(TASKS) and result[way]["valid_share"] == 1.0
        assert 0 < result[way]["first_delta_s_p50"] <= result[way]["last_delta_s_p50"]
    assert result["whole"]["deltas_p50"] >= 1 and result["first_delta_ratio"] > 0


def test_measure_with_a_tool_offered_gets_a_call_or_a_valid_object_every_time(tiny_gateway):
    result = measure(f"{tiny_gateway.base_url}/v1", TINY_GATEWAY_KEYS["tenant0"], "tiny", 1, 32, tools=True)
    for way in ("checked", "whole"):
        assert result[way]["num_replies"] == len(TASKS) and result[way]["valid_share"] == 1.0
        assert 0.0 <= result[way]["call_share"] <= 1.0 and result[way]["first_delta_s_p50"] > 0


def test_measure_typed_tasks_gives_objects_valid_with_their_formats(tiny_gateway):
    from benchmarks.bench_structured_stream import TYPED_TASKS

    assert all(is_steerable(schema) and not is_steerable(whole_schema(schema)) for _, schema in TYPED_TASKS)
    result = measure(f"{tiny_gateway.base_url}/v1", TINY_GATEWAY_KEYS["tenant0"], "tiny", 1, 32, tasks=TYPED_TASKS)
    for way in ("checked", "whole"):
        assert result[way]["num_replies"] == len(TYPED_TASKS) and result[way]["valid_share"] == 1.0
