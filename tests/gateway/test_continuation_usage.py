"""The prompt-cache counts of a reply written with continuations (forced tool calls,
json_schema replies): the prompt's own full blocks, as a plain reply reports them, never
the suffix's, never the whole prompt, never a partial block."""
from __future__ import annotations

import types

from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Prepared
from gateway.engine_streams import Continuations
from gateway.local_generation import LocalCall

BLOCK = 16


class FakeTokenizer:
    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


class FakeEngine:
    """Each generation: a first event with the cached tokens (of prompt + suffix) the
    worker found, a few tokens, and a finish with the prompt + suffix blocks it wrote."""

    def __init__(self, found: list[int], wrote: list[int]) -> None:
        self.config = types.SimpleNamespace(block_size=BLOCK)
        self.tokenizer = FakeTokenizer()
        self.max_context_tokens = 4096
        self.found, self.wrote = list(found), list(wrote)
        self.items = []

    async def generate(self, item):
        self.items.append(item)
        found, wrote = self.found.pop(0), self.wrote.pop(0)
        yield TokenEvent(item.request_id, [1], "a", num_cached_tokens=found, worker_id="w0")
        yield TokenEvent(item.request_id, [2], "b")
        yield FinishEvent(item.request_id, "length", len(item.prompt_token_ids), found, 2, 0.01, "w0",
                          num_cache_write_tokens=wrote)


def _continuations(engine, num_prompt: int) -> Continuations:
    call = LocalCall(list(range(num_prompt)), SamplingParams(max_tokens=50), None, None, None, False)
    prepared = Prepared("req", "t", "m", num_prompt, 50, payload=call)
    return Continuations(engine, prepared, call)


def _suffix_blocks(num_prompt: int, suffix: str) -> int:
    """Full blocks of prompt + suffix past the prompt's own full blocks."""
    return (num_prompt + len(suffix)) // BLOCK * BLOCK - num_prompt // BLOCK * BLOCK


async def test_a_first_generation_closed_early_counts_the_prompt_blocks_its_worker_wrote():
    num_prompt = 926   # 57 full blocks (912 tokens) and 14 tokens more
    engine = FakeEngine(found=[0, 912], wrote=[0, 0])
    generate = _continuations(engine, num_prompt)
    pieces = generate.stream('{"city": "', 20, ())
    assert await anext(pieces) == "a"
    await pieces.aclose()   # forcing closes the first generation: no finish is read
    await generate('{"city": "Paris", ', 20, ())   # a later one finds the prompt cached
    assert generate.usage.num_cached_tokens == 0
    assert generate.usage.num_cache_write_tokens == 912   # all 57 blocks, not 0 nor a partial 14


async def test_a_repeated_prompt_reports_its_own_cached_blocks_and_writes_none():
    num_prompt = 926
    suffix = '{"city": "'
    found = num_prompt + len(suffix) - 1   # the worker found prompt and suffix cached (all but one token)
    found -= found % BLOCK
    engine = FakeEngine(found=[found], wrote=[0])
    generate = _continuations(engine, num_prompt)
    await generate(suffix, 20, ())
    assert generate.usage.num_cached_tokens == (num_prompt - 1) // BLOCK * BLOCK == 912   # never 926
    assert generate.usage.num_cache_write_tokens == 0


async def test_a_prompt_of_whole_blocks_is_cached_at_most_to_the_block_before_its_last_token():
    num_prompt = 64
    engine = FakeEngine(found=[80], wrote=[0])   # the suffix's block too
    generate = _continuations(engine, num_prompt)
    await generate("x" * 20, 20, ())
    assert generate.usage.num_cached_tokens == 48   # as a plain reply's: the last token is computed
    assert generate.usage.num_cache_write_tokens == 0


async def test_a_first_generation_read_to_its_finish_counts_only_the_prompt_blocks_it_wrote():
    num_prompt, suffix = 200, "y" * 40   # 12 full prompt blocks (192), the suffix completes 2 more
    engine = FakeEngine(found=[64, 224], wrote=[128 + _suffix_blocks(num_prompt, suffix), 16])
    generate = _continuations(engine, num_prompt)
    await generate(suffix, 20, ())
    await generate(suffix + "z" * 16, 20, ())   # a later generation's suffix writes are no prompt's
    assert generate.usage.num_cached_tokens == 64
    assert generate.usage.num_cache_write_tokens == 192 - 64
    # one whose cache had no room for all of them says so in its finish
    engine = FakeEngine(found=[64], wrote=[37])
    generate = _continuations(engine, num_prompt)
    await generate(suffix, 20, ())
    assert generate.usage.num_cache_write_tokens == 32   # whole blocks only


async def test_a_json_schema_reply_on_the_tiny_engine_reports_whole_prompt_blocks():
    from gateway.config import LocalModelConfig
    from gateway.local import LocalBackend
    from gateway.local_generation import run_structured
    from gateway.schemas import ChatCompletionRequest, validate

    schema = {"type": "object", "additionalProperties": False, "required": ["city"],
              "properties": {"city": {"enum": ["Paris", "Rome", "Oslo"]}}}
    request = validate(ChatCompletionRequest, {
        "model": "m", "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "The weather in a city, as JSON. " * 12}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}})
    local = LocalBackend(LocalModelConfig(name="m", path="tiny", num_workers=1))
    await local.start()
    try:
        usages = []
        for _ in range(2):
            prepared = await local.prepare_chat(request, "t", "req")
            events = [event async for event in run_structured(local.engine, prepared, prepared.payload)]
            usages.append(events[-1].usage)
    finally:
        await local.stop()
    num_prompt = usages[0].num_prompt_tokens
    assert num_prompt > 3 * BLOCK
    first, second = usages
    assert (first.num_cached_tokens, first.num_cache_write_tokens) == (0, num_prompt // BLOCK * BLOCK)
    assert (second.num_cached_tokens, second.num_cache_write_tokens) == ((num_prompt - 1) // BLOCK * BLOCK, 0)
