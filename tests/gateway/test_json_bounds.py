"""Leaf values moved into their schema's bounds and lengths: known answers, the invariant
on random bounds (checked by jsonschema itself), and a whole reply for a pydantic-style
schema built from a model that writes nothing usable."""
import json
import random

import pytest
from jsonschema import Draft4Validator, Draft202012Validator

from gateway.json_bounds import number_in_bounds, string_in_bounds
from gateway.json_smallest import zero_value
from gateway.tool_forcing import forced_json


@pytest.mark.parametrize("value,schema,integer,expected", [
    (-5, {"minimum": 0}, False, 0), (5, {"minimum": 0}, True, 5), (42, {"maximum": 10}, True, 10),
    (0, {"exclusiveMinimum": 0}, True, 1), (0, {"exclusiveMinimum": 0}, False, 1),
    (0, {"exclusiveMinimum": 0, "exclusiveMaximum": 1}, False, 0.5), (10, {"exclusiveMaximum": 10}, True, 9),
    (2.5, {"minimum": 0.5, "maximum": 1.5}, True, 1), (0, {"minimum": 0.5}, True, 1),
    (7, {"multipleOf": 5}, True, 5), (8, {"multipleOf": 5}, True, 10), (0.33, {"multipleOf": 0.25}, False, 0.25),
    (1, {"minimum": 3, "multipleOf": 4}, True, 4), (3.7, {}, True, 4), (3.7, {}, False, 3.7),
    (0, {"minimum": 2, "exclusiveMinimum": 1}, True, 2), (0, {"minimum": 1, "exclusiveMinimum": 2}, True, 3),
])
def test_number_in_bounds_known_answers(value, schema, integer, expected):
    got = number_in_bounds(value, schema, integer)
    assert got == expected and (isinstance(got, int) or not integer)


def test_draft4_boolean_exclusive_bounds():
    schema = {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "maximum": 3, "exclusiveMaximum": True}
    assert [number_in_bounds(v, schema, True) for v in (-1, 0, 2, 3, 9)] == [1, 1, 2, 2, 2]
    assert all(Draft4Validator(schema).is_valid(number_in_bounds(v, schema, True)) for v in (-1, 0, 3))


@pytest.mark.parametrize("integer", [True, False])
def test_number_in_bounds_validates_for_random_bounds_and_values(integer):
    rng = random.Random(11)
    for _ in range(3000):
        low = rng.choice([None, rng.randint(-50, 50), rng.uniform(-50, 50)])
        width = rng.choice([0, 1, 2.5, 7, 100])
        high = None if low is None and rng.random() < 0.5 else (low if low is not None else rng.randint(-50, 50)) + width
        schema = {"type": "integer" if integer else "number"}
        if low is not None:
            schema["exclusiveMinimum" if rng.random() < 0.4 else "minimum"] = low
        if high is not None:
            schema["exclusiveMaximum" if rng.random() < 0.4 else "maximum"] = high
        if rng.random() < 0.4 and (high is None or low is None or width >= 15):
            schema["multipleOf"] = rng.choice([2, 3, 5]) if integer else rng.choice([0.5, 0.25, 2, 5])
        value = rng.uniform(-200, 200)
        lowest, highest = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get(
            "maximum", schema.get("exclusiveMaximum"))
        exclusive = "exclusiveMinimum" in schema or "exclusiveMaximum" in schema
        if lowest is not None and highest is not None and (
                integer and highest - lowest < 2.5 or highest == lowest and exclusive):
            continue   # no integer may lie strictly inside; or an empty range
        got = number_in_bounds(value, schema, integer)
        assert Draft202012Validator(schema).is_valid(got), (value, schema, got)


def test_string_in_bounds_cuts_and_pads():
    assert string_in_bounds("abcdef", {"maxLength": 3}) == "abc"
    assert string_in_bounds("a", {"minLength": 3}) == "a--"
    assert string_in_bounds("ok", {"minLength": 1, "maxLength": 5}) == "ok"
    assert string_in_bounds("é" * 9, {"maxLength": 4}) == "é" * 4   # code points, as JSON Schema counts


@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 1, "maximum": 5}, {"type": "number", "exclusiveMinimum": 0},
    {"type": "integer", "minimum": 10, "multipleOf": 7}, {"type": "string", "minLength": 3},
    {"type": "string", "maxLength": 0}, {"type": ["null", "number"], "maximum": -2}])
def test_zero_value_is_inside_the_bounds(schema):
    assert Draft202012Validator(schema).is_valid(zero_value(schema))


async def test_a_pydantic_style_reply_from_a_model_that_writes_nothing_usable_validates():
    """ge / gt / le / multiple_of / min_length / max_length: not steered as the text streams,
    so the object is built from nothing; before, its placeholders (0, "") broke the bounds."""
    schema = {"type": "object", "additionalProperties": False, "required": ["title", "rating", "weight", "code", "step"],
              "properties": {"title": {"type": "string", "minLength": 3, "maxLength": 20},
                             "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                             "weight": {"type": "number", "exclusiveMinimum": 0},
                             "code": {"type": "string", "maxLength": 4}, "step": {"type": "integer", "multipleOf": 10,
                                                                                  "minimum": 5}}}
    answers = {'"title": "': "Hi", '"rating": ': " 9", '"weight": ': " -3", '"code": "': "ABCDEFG", '"step": ': " 42"}
    calls = []

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        calls.append(suffix)
        return next((a for k, a in answers.items() if suffix.endswith(k)), "\x00 garbage")

    value = json.loads("".join([piece async for piece in forced_json(schema, generate, 100)]))
    assert value == {"title": "Hi-", "rating": 5, "weight": 1, "code": "ABCD", "step": 40}
    assert Draft202012Validator(schema).is_valid(value) and len(calls) > 1


async def test_a_streamed_reply_is_cut_where_it_leaves_its_bounds_and_the_rest_kept_inside():
    """Bounds and lengths are steered as the text streams: the string is sent up to its
    `maxLength`, then closed; the number past `maximum` is not sent, and asked again."""
    from tests.gateway.test_tool_forcing import streamed

    schema = {"type": "object", "required": ["code", "stars"], "additionalProperties": False,
              "properties": {"code": {"type": "string", "maxLength": 3},
                             "stars": {"type": "integer", "minimum": 1, "maximum": 5}}}
    answers = {'"code": "OSL': 'O and more', '"stars": ': " 9"}

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return next((a for k, a in answers.items() if suffix.endswith(k)), "\x00")

    pieces = [p async for p in forced_json(schema, generate, 100, streamed(['"code": "OS', 'LO", "stars": 9}'], []))]
    assert "".join(pieces) == '{"code": "OSL", "stars": 5}'
    assert pieces[0] == '{"code": "OS'   # sent before the model wrote past the limit


def test_a_number_too_long_to_read_strays_instead_of_failing():
    from gateway.json_prefix import JsonPrefix

    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 5}, "m": {"type": "integer"}}}
    reply = JsonPrefix(schema).feed('{"n": ' + "1" * 5000 + ",")
    assert reply.has_deviated and reply.committed() == '{"n": '
    assert not JsonPrefix(schema).feed('{"m": ' + "1" * 5000 + ",").has_deviated   # no bounds: not read


@pytest.mark.parametrize("kind", ["integer", "number"])
async def test_a_number_past_a_float_is_replaced_by_a_valid_one(kind):
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": kind, "minimum": 2}}}

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return " 1e999" if suffix.endswith('"n": ') else "\x00"

    text = "".join([piece async for piece in forced_json(schema, generate, 100)])
    assert json.loads(text) == {"n": 2}


def test_a_step_so_small_the_quotient_overflows_leaves_the_value_in_bounds_not_a_500():
    # QA62: value / 1e-320 is past float's range; round() raised OverflowError (a 500)
    schema = {"type": "number", "multipleOf": 1e-320, "minimum": 0.5}
    assert number_in_bounds(0.0, schema, integer=False) == 0.5


@pytest.mark.parametrize(("schema", "text", "expected"), [
    ({"maxLength": 2.0}, "abcdef", "ab"),      # a whole float is the count it spells, as jsonschema takes it
    ({"minLength": 3.0}, "a", "a--"),
    ({"maxLength": 2.5}, "abcdef", "abcdef"),  # not a count: ignored, as before
])
def test_whole_float_lengths_are_counts(schema, text, expected):
    assert string_in_bounds(text, schema) == expected


@pytest.mark.parametrize(("value", "step"), [(19.99, 0.01), (0.57, 0.01), (4.35, 0.01), (0.3, 0.1), (1.1, 0.1)])
def test_a_price_a_hair_off_in_floats_is_a_multiple_and_kept(value, step):
    # QA72: jsonschema's int(q) == q test moved 19.99 to 19.98 under multipleOf 0.01
    schema = {"type": "number", "multipleOf": step, "minimum": 0}
    assert number_in_bounds(value, schema, integer=False) == value


def test_a_value_truly_off_a_multiple_still_moves():
    assert number_in_bounds(19.995, {"type": "number", "multipleOf": 0.01}, integer=False) in (19.99, 20.0)
