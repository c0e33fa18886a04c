"""Patterns checked within a bound (QA62 H1), spelled within `minLength`/`maxLength`
(H3), and classes whose members are all non-ASCII or repeats past 64 held (M3)."""
import json
import re
import time

import pytest
from jsonschema import Draft202012Validator

from gateway.json_formats import format_checker, whole_string_check
from gateway.json_patterns import usable_pattern
from gateway.tool_forcing import forced_json


def _schema(**string) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", **string}}, "required": ["s"],
            "additionalProperties": False}


def _valid(text: str, schema: dict) -> dict:
    value = json.loads(text)
    Draft202012Validator(schema, format_checker=format_checker()).validate(value)
    return value


async def _reply(schema: dict, free: str, answer: str = "\x00") -> str:
    """The reply when the model's free try is `free` and it answers `answer` to every ask."""
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return answer

    async def stream(suffix: str, max_tokens: int, stop: tuple[str, ...]):
        yield free

    return "".join([piece async for piece in forced_json(schema, generate, 200, stream)])


@pytest.mark.parametrize("pattern", [r"^(a+)+b$", r"^(a|aa)+$", r"^([a-zA-Z0-9]+\s?)+$"])
async def test_a_nested_quantifier_pattern_on_a_long_model_string_ends_and_the_reply_validates(pattern):
    """Python's `re` takes minutes on these (the time doubles per character); the reader
    and the filler check within a bound, and the reply takes a string the gateway spells."""
    schema = _schema(pattern=pattern)
    began = time.monotonic()
    text = await _reply(schema, '"s": "' + "a" * 30 + '!"}', answer="a" * 30 + "!")
    assert _valid(text, schema)["s"] != "a" * 30 + "!"
    assert time.monotonic() - began < 5   # generous: the old code took minutes here


@pytest.mark.parametrize("pattern", [r"^(a+)+b$", r"^(a|aa)+$"])
def test_a_whole_string_check_on_a_pathological_pattern_is_bounded(pattern):
    check = whole_string_check({"type": "string", "pattern": pattern})
    began = time.monotonic()
    assert check("a" * 5000 + "!") is False
    assert check("a" * 4 + ("b" if "b" in pattern else "")) is True
    assert time.monotonic() - began < 5


@pytest.mark.parametrize("pattern,spelled", [
    (r"^[А-Яа-я]+$", "А"), (r"^[é-ü]{2}$", "éé"),
    (r"^[😀-🙏]{2}$", "😀😀"), (r"^a{1000}$", "a" * 1000),
    (r"^[\u4e00-\u9fff]{2,}$", "一一")])
async def test_non_ascii_classes_and_long_repeats_are_held(pattern, spelled):
    schema = _schema(pattern=pattern)
    assert usable_pattern(schema["properties"]["s"]) is not None
    assert _valid(await _reply(schema, '"s": "Bob"}'), schema) == {"s": spelled}


@pytest.mark.parametrize("string,model,expected", [
    ({"pattern": r"^[a-z0-9_]+$", "minLength": 3, "maxLength": 20}, "a", "aaa"),
    ({"pattern": r"^[a-z0-9_]+$", "minLength": 3, "maxLength": 20}, "al", "aaa"),
    ({"pattern": r"^[a-z0-9_]+$", "minLength": 3, "maxLength": 20}, "alice_01", "alice_01"),
    ({"pattern": r"[a-z0-9]", "maxLength": 3}, "abcdefghijklmnopqrstuvwxyz0123456789abcdefghi", "abc"),
    ({"pattern": r"[a-z0-9]", "minLength": 5}, "ab", "ab---"),
    ({"pattern": r"^(ab)+$", "minLength": 3, "maxLength": 20}, "ab", "abab"),
    ({"pattern": r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", "minLength": 10, "maxLength": 12}, "Bob", "A Aaaaaaaa"),
])
async def test_a_pattern_with_lengths_gives_a_string_meeting_both(string, model, expected):
    """The model's text is kept where it matches within the lengths (cut or padded to them
    where that still matches), else the gateway spells one of the right length."""
    schema = _schema(**string)
    assert _valid(await _reply(schema, '"s": "' + model + '"}', answer=model), schema) == {"s": expected}


async def test_a_pydantic_field_with_pattern_and_lengths_parses_in_the_client():
    from pydantic import BaseModel, Field

    class User(BaseModel):
        handle: str = Field(pattern=r"^[a-z0-9_]+$", min_length=3, max_length=20)

    text = await _reply(User.model_json_schema(), '"handle": "a"}', answer="a")
    assert User.model_validate_json(text).handle == "aaa"


_SPELLED = [r"^(a+)+b$", r"^[a-z0-9_]+$", r"[a-z0-9]", r"^\d{3}-\d{4}$", r"(?i)^yes|no$", r"^[А-Яа-я]+$",
            r"@corp\.com$"]
_LENGTHS = [(0, None), (3, 20), (9, 9), (12, None)]
_NO_STRING = {(r"^\d{3}-\d{4}$", 9, 9), (r"^\d{3}-\d{4}$", 12, None)}   # only 8 characters match


@pytest.mark.parametrize("pattern,shortest,longest", [
    (p, lo, hi) for p in _SPELLED for lo, hi in _LENGTHS if (p, lo, hi) not in _NO_STRING])
async def test_every_spelled_string_meets_pattern_and_lengths(pattern, shortest, longest):
    schema = _schema(pattern=pattern, minLength=shortest, **({} if longest is None else {"maxLength": longest}))
    value = _valid(await _reply(schema, '"s": "\x00'), schema)["s"]
    assert re.search(pattern, value) and shortest <= len(value)
