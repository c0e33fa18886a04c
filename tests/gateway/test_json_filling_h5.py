"""Fallback values that meet their schema's other keywords: typed formats with a pattern or
lengths (QA62 M1), enum/const/default members checked against their siblings (M2), and
whole values validated with bounded pattern checks (H1, `json_validity`)."""
import json
import time

import pytest
from jsonschema import Draft202012Validator

from gateway.json_formats import format_checker
from gateway.json_smallest import zero_value
from gateway.tool_forcing import forced_json

FORMATTED = [{"type": "string", "format": "email", "maxLength": 10},
             {"type": "string", "format": "email", "pattern": r"@corp\.com$"},
             {"type": "string", "format": "email", "minLength": 30},
             {"type": "string", "format": "date", "pattern": "^2025-"},
             {"type": "string", "format": "date-time", "pattern": "^2024-06"},
             {"type": "string", "format": "uuid", "pattern": "^1"},
             {"type": "string", "format": "uuid", "pattern": "[a-f]$"},
             {"type": "string", "format": "ipv4", "pattern": r"^192\.168\."},
             {"type": "string", "format": "time", "pattern": "^12"}]
SIBLINGS = [({"type": "integer", "enum": [1, 2, 50], "minimum": 10}, 50),
            ({"type": "string", "enum": ["abc", "XYZ"], "pattern": "^X"}, "XYZ"),
            ({"type": "string", "format": "date", "default": None}, "1970-01-01"),
            ({"type": "integer", "minimum": 5, "default": 0}, 5),
            ({"type": "string", "pattern": "^X+$", "default": "abc"}, "X"),
            ({"type": "string", "maxLength": 2, "default": "abc"}, ""),
            ({"type": "integer", "minimum": 5, "default": 7}, 7),
            ({"enum": [True, 1, "1"], "type": "integer"}, 1)]


def _valid(value, schema: dict):
    Draft202012Validator(schema, format_checker=format_checker()).validate(value)
    return value


async def _reply(schema: dict, free: str, answer: str) -> dict:
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return answer

    async def stream(suffix: str, max_tokens: int, stop: tuple[str, ...]):
        yield free

    whole = {"type": "object", "properties": {"s": schema}, "required": ["s"]}
    return _valid(json.loads("".join([p async for p in forced_json(whole, generate, 200, stream)])), whole)


@pytest.mark.parametrize("schema", FORMATTED)
def test_a_typed_placeholder_meets_the_pattern_and_lengths_beside_it(schema):
    _valid(zero_value(schema), schema)


@pytest.mark.parametrize("schema", FORMATTED)
@pytest.mark.parametrize("answer", ["1", "user@example.com", "2023-01-05", "tomorrow"])
async def test_a_typed_string_the_model_gives_is_kept_only_where_it_meets_pattern_and_lengths(schema, answer):
    await _reply(schema, '"s": "\x00', answer)


async def test_a_typed_string_the_model_gives_that_meets_everything_is_kept():
    schema = {"type": "string", "format": "date", "pattern": "^2025-"}
    assert await _reply(schema, '"s": "\x00', "March 3rd, 2025") == {"s": "2025-03-03"}


@pytest.mark.parametrize("schema,value", SIBLINGS)
def test_a_fallback_member_meets_the_keywords_beside_it(schema, value):
    assert _valid(zero_value(schema), schema) == value and type(zero_value(schema)) is type(value)


@pytest.mark.parametrize("schema,value", [(s, v) for s, v in SIBLINGS   # not a plain string: the model's own is kept
                                          if "pattern" in s or "format" in s or s["type"] != "string"])
async def test_the_filler_falls_back_to_a_member_that_meets_the_keywords_beside_it(schema, value):
    assert await _reply(schema, '"s": \x00', "\x00") == {"s": value}


async def test_the_filler_takes_no_enum_member_the_keywords_beside_it_rule_out():
    """The model names 1, in the enum but below `minimum`: the filler takes 50 instead."""
    assert await _reply({"type": "integer", "enum": [1, 2, 50], "minimum": 10}, '"s": \x00', "1") == {"s": 50}


@pytest.mark.parametrize("pattern", [r"^(a|aa)+$", r"^([a-zA-Z0-9]+\s?)+$"])
def test_whole_value_validation_checks_patterns_within_a_bound(pattern):
    from gateway.json_validity import is_valid

    schema = {"type": "object", "properties": {"_s": {"type": "string", "pattern": pattern}},
              "patternProperties": {pattern: {"type": "integer"}}, "additionalProperties": False}
    began = time.monotonic()
    assert is_valid({"_s": "a" * 4000 + "!"}, schema) is False
    assert is_valid({"a" * 4000 + "!": 1}, schema) is False
    assert is_valid({"_s": "aaaa", "aa": 1}, schema) is True
    assert is_valid({"_s": "aaaa", "aa": "x"}, schema) is False
    assert time.monotonic() - began < 5   # generous: Python's `re` takes minutes on each
