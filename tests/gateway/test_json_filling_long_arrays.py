"""A schema that needs a long array (`minItems` in the thousands): the filler's work per
value does not grow with what it wrote, it asks and tokenizes nothing once the budget is
spent, it gives the event loop its turn (so a cancel stops it), and the schema too large
to write is a 400 naming its parameter. A scripted engine (the tiny model's tokenizer)
answers each continuation."""
import asyncio
import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from shards.model_loader import load_model
from shards.protocol import FinishEvent, SamplingParams, TokenEvent

from gateway.backend import Finished, Prepared, TextDelta
from gateway.suffix_tokens import SuffixTokens
from gateway.errors import ApiError
from gateway.json_filling import JsonText, LeafFiller
from gateway.json_smallest import MAX_FILLED_VALUES, PAUSE_EVERY_VALUES
from gateway.local_generation import ForcedCall, LocalCall, run_forced, run_structured

PROMPT = [1, 2, 3]


def long_array(num_items: int) -> dict:
    return {"type": "object", "additionalProperties": False, "required": ["a"],
            "properties": {"a": {"type": "array", "items": {"type": "integer"}, "minItems": num_items}}}


class CountingTokenizer:
    """The tiny model's tokenizer (and its fast backend), counting the characters each
    encode is given."""

    def __init__(self, tokenizer, sizes: list[int] | None = None, backend: bool = False):
        self.inner, self.sizes = tokenizer, [] if sizes is None else sizes
        if not backend:
            self.backend_tokenizer = CountingTokenizer(tokenizer.backend_tokenizer, self.sizes, backend=True)

    def encode(self, text: str, add_special_tokens: bool = False):
        self.sizes.append(len(text))
        return self.inner.encode(text, add_special_tokens=add_special_tokens)


class ScriptedEngine:
    """Every continuation is answered " 7" (one token a character)."""

    max_context_tokens = 1_000_000

    def __init__(self, tokenizer):
        self.tokenizer, self.requests = tokenizer, []

    async def generate(self, item):
        self.requests.append(item)
        text = " 7"[:item.sampling.max_tokens]
        for index, char in enumerate(text):
            yield TokenEvent(item.request_id, [ord(char)], char, worker_id="w0" if index == 0 else None,
                             num_cached_tokens=0 if index == 0 else None)
        yield FinishEvent(item.request_id, "stop", len(item.prompt_token_ids), 0, len(text), 0.01, "w0")


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return load_model("tiny").tokenizer


def structured(schema: dict, max_tokens: int, tokenizer, tools: dict | None = None, forced: str | None = None):
    engine = ScriptedEngine(CountingTokenizer(tokenizer))
    call = LocalCall(PROMPT, SamplingParams(max_tokens=max_tokens), None,
                     None if tools is None else frozenset(tools), None if forced is None
                     else ForcedCall(tools, forced), False, response_schema=schema, tool_schemas=tools)
    prepared = Prepared("req", "t", "m", len(PROMPT), len(PROMPT) + max_tokens, call, PROMPT)
    run = run_structured if forced is None else run_forced
    return engine, run(engine, prepared, call)


async def test_each_value_tokenizes_only_what_was_written_since_the_last_ask(tiny_tokenizer):
    engine, reply = structured(long_array(600), 10_000, tiny_tokenizer)
    events = [event async for event in reply]
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    assert json.loads(text) == {"a": [7] * 600}
    assert len(engine.requests) >= 600 and len(text) > 1500
    sizes = engine.tokenizer.sizes
    assert max(sizes[20:]) < 100, max(sizes)   # was the whole text so far, every value
    assert sum(sizes) < 20 * len(text)
    for item in engine.requests[-3:]:   # the ids are those of the whole text
        written = item.prompt_token_ids[len(PROMPT):]
        assert written == tiny_tokenizer.encode(tiny_tokenizer.decode(written), add_special_tokens=False)


async def test_a_spent_budget_stops_the_asks_and_the_tokenizing_and_the_reply_stays_whole(tiny_tokenizer):
    engine, reply = structured(long_array(3000), 10, tiny_tokenizer)
    events = [event async for event in reply]
    value = json.loads("".join(event.text for event in events if isinstance(event, TextDelta)))
    assert len(value["a"]) == 3000
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.finish_reason == "stop"
    assert finished.usage.num_completion_tokens <= 10
    assert len(engine.requests) <= 10
    assert len(engine.tokenizer.sizes) <= len(engine.requests) + 8   # was one encode per value: 3000


async def nothing(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
    return ""


async def ticks_while(work) -> tuple[object, int]:
    """`work`'s result and how often another task ran meanwhile."""
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    other = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    try:
        return await work, ticks
    finally:
        other.cancel()


@pytest.mark.parametrize("deep", [False, True])
async def test_a_long_fill_gives_the_event_loop_its_turn(deep):
    """Filled value by value (depth 1), or written whole without the model (`minimal`, at
    MAX_DEPTH): other tasks run every PAUSE_EVERY_VALUES values."""
    items = {"type": "array", "items": {"type": "integer"}, "minItems": 3000}
    for _ in range(4 if deep else 0):
        items = {"type": "array", "items": items, "minItems": 1, "maxItems": 1}
    schema = {"type": "object", "required": ["a"], "properties": {"a": items}}

    async def fill():
        return "".join([piece async for piece in LeafFiller(schema, nothing, JsonText("")).root_object()])

    text, ticks = await ticks_while(fill())
    assert json.loads(text)
    assert ticks >= 3000 // PAUSE_EVERY_VALUES - 2, ticks   # was 0: the loop held for the whole fill


async def test_a_fill_whose_client_left_stops_at_its_next_pause():
    num_asks = 0

    async def counted(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        nonlocal num_asks
        num_asks += 1
        return ""

    async def fill():
        return [piece async for piece in LeafFiller(long_array(50_000), counted, JsonText("")).root_object()]

    task = asyncio.ensure_future(fill())
    for _ in range(5):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert num_asks < 10 * PAUSE_EVERY_VALUES   # was all 50,000: the cancel came after the fill


def too_large() -> dict:
    """Its smallest value has 1,000,000 values, written without the model (past MAX_DEPTH)."""
    items = {"type": "array", "minItems": 1000,
             "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1000}}
    for _ in range(3):
        items = {"type": "array", "items": items, "minItems": 1, "maxItems": 1}
    return {"type": "object", "required": ["a"], "additionalProperties": False, "properties": {"a": items}}


async def test_a_schema_too_large_to_write_is_a_400_naming_its_parameter(tiny_tokenizer):
    assert 1000 * 1000 > MAX_FILLED_VALUES
    engine, reply = structured(too_large(), 10, tiny_tokenizer)
    with pytest.raises(ApiError) as refused:
        [event async for event in reply]
    assert (refused.value.status, refused.value.code) == (400, "invalid_value")
    assert refused.value.param == "response_format.json_schema.schema"   # was None
    tools = {"small": {"type": "object", "properties": {}}, "big": too_large()}
    engine, reply = structured(None, 10, tiny_tokenizer, tools=tools, forced="big")
    with pytest.raises(ApiError) as refused:
        [event async for event in reply]
    assert refused.value.param == "tools[1].function.parameters"


def trained_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE with merges (as Qwen's and Llama 3's are), trained on JSON."""
    texts = [json.dumps({"a": [i * 37 % 1000, i], "name": "the city " * (i % 3), "x": [[[]]], "é": "😀"})
             for i in range(500)]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


async def test_spliced_suffix_ids_are_those_of_a_whole_encode():
    tokenizer = trained_tokenizer()
    tokens, text = SuffixTokens(tokenizer), ""
    pieces = ['"the city", ', "12345", "678", ", ", "[[[]]]", "]]]]]]]]", '"é😀€"', " ", "}", "a" * 30]
    for index in range(200):   # a long new part now and then: tokenized a chunk at a time
        text += pieces[index * 7 % len(pieces)] + ("x y" * 2000 if index % 97 == 5 else "")
        ids = list(await tokens.encode(text, 10**9))
        assert ids == tokenizer.encode(text, add_special_tokens=False), index
    assert tokens.splices and tokens.num_chars_tokenized < 3 * len(text)
