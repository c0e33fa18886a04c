"""Continuations and structured replies on the tiny model's real engine."""
import json

from jsonschema import Draft202012Validator

from gateway.backend import Finished, TextDelta, ToolCallDelta
from gateway.config import LocalModelConfig
from gateway.local import LocalBackend
from gateway.engine_streams import Continuations
from gateway.local_generation import run_forced, run_structured
from gateway.schemas import ChatCompletionRequest, validate

SCHEMA = {"type": "object", "additionalProperties": False, "required": ["city", "days", "tags"],
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                         "tags": {"type": "array", "items": {"enum": ["sun", "rain"]}, "maxItems": 2}}}


TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _request(max_tokens: int, **more) -> ChatCompletionRequest:
    return validate(ChatCompletionRequest, {
        "model": "m", "max_tokens": max_tokens, "temperature": 0,
        "messages": [{"role": "user", "content": "The weather, as JSON."}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": SCHEMA}}, **more})


async def test_a_continuation_cut_short_counts_its_tokens_and_names_its_worker():
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    await local.start()
    try:
        prepared = await local.prepare_chat(_request(64), "t", "req")
        generate = Continuations(local.engine, prepared, prepared.payload)
        pieces = generate.stream("{", 40, ())
        read = [await anext(pieces) for _ in range(3)]   # then stop reading
        await pieces.aclose()
        assert len(read) == 3
        assert 3 <= generate.usage.num_completion_tokens < 40
        assert generate.worker in ("w0", "w1") and generate.ttft_s is not None and generate.ttft_s > 0
        assert not local.engine._streams   # the cut generation left no stream behind
        before = generate.usage.num_completion_tokens
        await generate("{", 5, ())   # one read to its end adds its finish's count
        assert 1 <= generate.usage.num_completion_tokens - before <= 5
    finally:
        await local.stop()


async def test_a_structured_reply_streams_in_pieces_that_make_a_valid_object_within_its_budget():
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    await local.start()
    try:
        prepared = await local.prepare_chat(_request(48), "t", "req")
        events = [event async for event in run_structured(local.engine, prepared, prepared.payload)]
    finally:
        await local.stop()
    pieces = [event.text for event in events if isinstance(event, TextDelta)]
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "stop"
    assert Draft202012Validator(SCHEMA).is_valid(json.loads("".join(pieces)))
    assert len(pieces) > 1 and all(pieces)
    assert 0 < finished.usage.num_completion_tokens <= 48
    assert finished.worker in ("w0", "w1")


async def test_a_structured_reply_with_a_tool_offered_is_a_call_or_a_valid_object_and_leaves_no_stream():
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    await local.start()
    try:
        for seed in range(3):
            prepared = await local.prepare_chat(_request(48, tools=[TOOL], seed=seed, temperature=1.0), "t", "req")
            events = [event async for event in run_structured(local.engine, prepared, prepared.payload)]
            finished = events[-1]
            calls = [event for event in events if isinstance(event, ToolCallDelta)]
            if calls:
                assert finished.finish_reason in ("tool_calls", "length") and calls[0].name == "get_weather"
            else:
                assert finished.finish_reason == "stop"
                assert Draft202012Validator(SCHEMA).is_valid(json.loads(
                    "".join(event.text for event in events if isinstance(event, TextDelta))))
            assert 0 < finished.usage.num_completion_tokens <= 48
            assert not local.engine._streams
    finally:
        await local.stop()


async def test_a_structured_or_forced_reply_abandoned_midway_stops_its_generations_at_once():
    """A client gone mid-reply: closing the reply closes every engine stream under it,
    also those read by generators suspended between the two."""
    local = LocalBackend(LocalModelConfig(name="m", path="tiny"))
    await local.start()
    try:
        asks = [{}, {"tools": [TOOL]}, {"tools": [TOOL], "tool_choice": "required", "response_format": None}]
        runs = set()
        for extra in asks:
            for cut_after in (1, 2, 3):   # the forced call's reply is 4 events: its filled text goes out joined
                prepared = await local.prepare_chat(_request(64, **extra), "t", "req")
                run = run_forced if prepared.payload.forced is not None else run_structured
                runs.add(run)
                reply = run(local.engine, prepared, prepared.payload)
                events = [await anext(reply) for _ in range(cut_after)]
                await reply.aclose()
                assert events and not local.engine._streams, (extra, cut_after)
        assert runs == {run_forced, run_structured}
    finally:
        await local.stop()


def test_a_replys_cache_writes_are_whole_prompt_blocks_it_did_not_find():
    # QA77 F3: a stream resumed on another worker prefilled prompt + generated tokens there; what
    # it wrote is not this prompt's new blocks, and a clamp to prompt - cached gave a partial block (9)
    from gateway.local_generation import _finished
    from shards.protocol import FinishEvent

    def written(num_prompt: int, num_cached: int, num_wrote: int) -> int:
        event = FinishEvent("r", "stop", num_prompt, num_cached, 5, 0.1, "w0", num_cache_write_tokens=num_wrote)
        return _finished(event, block_size=16).usage.num_cache_write_tokens

    assert written(1113, 1104, 2900) == 0        # resumed: every full prompt block was found
    assert written(926, 0, 912) == 912           # a first run: its 57 full blocks
    assert written(926, 480, 912) == 432         # at most the full blocks it did not find
    assert written(40, 0, 8) == 0                # never a partial block
