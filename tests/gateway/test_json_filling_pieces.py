"""What the filler writes without the model goes out in a few pieces (QA78 #3): the text is
the same, joined before each ask that may reach the model, at each pause for the event
loop and at the end, not one event per value and separator."""
import json
import random

import pytest
from shards.model_loader import load_model

from gateway.backend import TextDelta
from gateway.json_filling import JsonText, LeafFiller
from gateway.json_smallest import PAUSE_EVERY_VALUES
from gateway.tool_forcing import forced_json
from tests.gateway.test_json_filling_long_arrays import long_array, structured
from tests.gateway.test_tool_forcing import NOISE, SCHEMAS, VALID, streamed


@pytest.fixture(scope="module")
def tiny_tokenizer():
    return load_model("tiny").tokenizer


async def nothing(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
    return ""


async def test_a_spent_budget_sends_the_filled_values_in_a_few_pieces(tiny_tokenizer):
    """minItems 5000 with a budget of 10 tokens: the old code sent 10,000 deltas (each `0`
    and each `, `), 2 MB of SSE for 15 KB of JSON."""
    engine, reply = structured(long_array(5000), 10, tiny_tokenizer)
    pieces = [event.text for event in [event async for event in reply] if isinstance(event, TextDelta)]
    value = json.loads("".join(pieces))
    assert len(value["a"]) == 5000
    assert len(pieces) <= 5000 // PAUSE_EVERY_VALUES + len(engine.requests) + 4, len(pieces)   # was 10,002
    assert len(pieces) >= 5000 // PAUSE_EVERY_VALUES - 1   # still sent as it goes, at each pause


async def test_the_pieces_join_to_the_same_text_whether_or_not_the_model_may_be_asked():
    schema = long_array(5000)
    asked = [p async for p in LeafFiller(schema, nothing, JsonText("")).root_object()]
    spent = [p async for p in LeafFiller(schema, nothing, JsonText(""), lambda: False).root_object()]
    expected = '{"a": [' + ", ".join(["0"] * 5000) + "]}"   # what the old code's 10,002 pieces joined to
    assert "".join(asked) == "".join(spent) == expected
    assert len(spent) <= 5000 // PAUSE_EVERY_VALUES + 2, len(spent)
    assert len(asked) == 5001   # one piece before each ask (each value's) and the rest at the end


async def test_each_ask_comes_after_all_that_was_written_before_it_went_out():
    """The client has the text decided so far while the model works: at each ask, the
    pieces sent so far are exactly the JSON in the ask's text."""
    sent: list[str] = []
    rng = random.Random(7)

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        assert suffix.startswith("HEAD" + "".join(sent)), (suffix, sent)
        assert suffix[len("HEAD" + "".join(sent)):] in ("", '"')   # a string's opening quote is the ask's own
        text = "".join(rng.choice(NOISE + ["7", "true", "ab"]) for _ in range(rng.randrange(4)))
        return min((text.split(s)[0] for s in stop), key=len, default=text)

    for schema in SCHEMAS:
        sent.clear()
        async for piece in LeafFiller(schema, generate, JsonText("HEAD")).root_object():
            sent.append(piece)
        assert isinstance(json.loads("".join(sent)), dict)


@pytest.mark.parametrize("budget", [0, 1, 3, 10])
async def test_a_budget_spent_midway_joins_to_the_text_the_model_answering_nothing_gives(budget):
    """`can_ask` false skips the asks: the reply is the one a model answering "" to each
    ask past the budget gives (what `Continuations` answers then), in fewer pieces."""
    rng = random.Random(budget)
    for schema, valid in zip(SCHEMAS, VALID):
        text = json.dumps(valid)[1:]
        for _ in range(10):
            free = text[:rng.randrange(len(text) + 1)]
            seed = rng.random()
            runs = []
            for skips in (False, True):
                answers = random.Random(seed)
                asks = []

                async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
                    asks.append(suffix)
                    if len(asks) > budget:
                        return ""
                    text = "".join(answers.choice(NOISE + ["7", "true"]) for _ in range(answers.randrange(4)))
                    return min((text.split(s)[0] for s in stop), key=len, default=text)

                can_ask = (lambda: len(asks) < budget) if skips else None
                pieces = [p async for p in forced_json(schema, generate, 100, streamed(list(free), []),
                                                       can_ask=can_ask)]
                runs.append(("".join(pieces), len(pieces), len(asks)))
            (unskipped, num_unskipped, _), (skipped, num_skipped, num_asks) = runs
            assert skipped == unskipped and num_skipped <= num_unskipped, (schema, free)
            assert num_asks <= budget
