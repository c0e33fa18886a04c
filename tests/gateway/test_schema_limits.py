"""OpenAI's Structured Outputs size limits, and a bound on the characters of a schema's
smallest value, checked where a local model's schema comes in (QA134 H2, H3, H4, M1): a
schema past them was walked on the event loop for seconds to hours (every tenant stalled),
wrote 50 MB for `max_tokens: 4`, or (a long `$ref` chain, a `$ref` cycle) was not held at
all: the reply broke the schema and finished `stop`."""
import json
from typing import Literal, Optional

import httpx
import pytest
from openai import pydantic_function_tool
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel

from gateway.errors import ApiError
from gateway.local_schemas import local_schema
from gateway.schema_limits import (BIG_ENUM_CHARS, BIG_ENUM_VALUES, MAX_ENUM_VALUES, MAX_NAME_AND_VALUE_CHARS,
                                   MAX_PROPERTIES, MAX_REF_HOPS)
from gateway.smallest_chars import MAX_SMALLEST_CHARS
from tests.gateway.test_json_recursive_schemas import SCHEMAS
from tests.gateway.test_local import SAY_JSON, _chat, backend

PARAM = "response_format.json_schema.schema"


def refused(schema: dict, code: str = "invalid_request") -> ApiError:
    with pytest.raises(ApiError) as caught:
        local_schema(schema, PARAM, code)
    assert (caught.value.status, caught.value.param) == (400, PARAM)
    return caught.value


def of(properties: dict, **rest) -> dict:
    return {"type": "object", "properties": properties, "required": list(properties), **rest}


def enum_of(n: int, width: int = 1) -> dict:
    return of({"a": {"enum": [f"{i:0{width}d}" for i in range(n)]}})


def big_enum(chars: int) -> dict:
    """An enum of BIG_ENUM_VALUES + 1 strings, `chars` characters in all."""
    members = [f"{i:04d}" for i in range(BIG_ENUM_VALUES + 1)]
    members[0] += "x" * (chars - 4 * len(members))
    return of({"a": {"enum": members}})


def ref_chain(hops: int) -> dict:
    """QA134's repro_refchain: property `a` -> d0 -> ... -> d{hops} (an object needing `z`)."""
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(hops)}
    defs[f"d{hops}"] = of({"z": {"type": "integer"}}, additionalProperties=False)
    return {**of({"a": {"$ref": "#/$defs/d0"}}, additionalProperties=False), "$defs": defs}


def nested(levels: int) -> dict:
    """An object whose innermost value lies `levels` below the root (each a property)."""
    schema: dict = {"type": "integer"}
    for level in range(levels):
        schema = of({f"k{level}": schema})
    return schema


def test_written_nesting_is_bounded_by_the_body_s_depth_not_here():
    """A forced tool call's parameters 29 objects deep are served (test_http_errors); a
    reference to a definition ends its chain: nested models each one hop."""
    deep = nested(29)
    assert local_schema(deep, PARAM) is deep
    defs = {f"M{i}": of({"next": {"$ref": f"#/$defs/M{i + 1}"}}) for i in range(40)} | {"M40": {"type": "integer"}}
    models = {**of({"m": {"$ref": "#/$defs/M0"}}), "$defs": defs}
    assert local_schema(models, PARAM) is models


@pytest.mark.parametrize("accepted,past,words", [
    (of({f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES)}),
     of({f"p{i}": {"type": "string"} for i in range(MAX_PROPERTIES + 1)}), "more than 5,000 object properties"),
    (of({"x": {"anyOf": [of({f"k{i}": {"type": "integer"}}) for i in range(MAX_PROPERTIES - 1)]}}),
     of({"x": {"anyOf": [of({f"k{i}": {"type": "integer"}}) for i in range(MAX_PROPERTIES)]}}),
     "more than 5,000 object properties"),   # QA134 anyofw10000: counted in all, through branches
    (enum_of(MAX_ENUM_VALUES), enum_of(MAX_ENUM_VALUES + 1), "more than 1,000 enum values"),
    (of({"a": {"enum": list(range(600))}, "b": {"$ref": "#/$defs/B"}}, **{"$defs": {"B": {"enum": list(range(400))}}}),
     of({"a": {"enum": list(range(600))}, "b": {"$ref": "#/$defs/B"}}, **{"$defs": {"B": {"enum": list(range(401))}}}),
     "more than 1,000 enum values"),
    (big_enum(BIG_ENUM_CHARS), big_enum(BIG_ENUM_CHARS + 1), "characters of strings"),
    (of({"a": {"enum": [f"{i:04d}" + "x" * 100 for i in range(BIG_ENUM_VALUES)]}}), big_enum(BIG_ENUM_CHARS + 1),
     "characters of strings"),   # 26,000 characters in 250 values: not a big enum
    (of({"a": {"const": "c" * (MAX_NAME_AND_VALUE_CHARS - 1)}}),
     of({"a": {"const": "c" * MAX_NAME_AND_VALUE_CHARS}}), "more than 120,000 characters"),
    (of({"n" * 60_000: {"type": "integer"}}, **{"$defs": {"d" * 60_000: {"type": "integer"}}}),
     of({"n" * 60_000: {"type": "integer"}}, **{"$defs": {"d" * 60_001: {"type": "integer"}}}),
     "more than 120,000 characters"),
    (ref_chain(MAX_REF_HOPS - 1), ref_chain(MAX_REF_HOPS), "its chain of `$ref`s nests more than 10 levels"),
    (of({"a": {"$ref": "#/$defs/d0"}}, **{"$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"},
                                                                       {"type": "null"}]} for i in range(9)}
                                         | {"d9": {"type": "integer"}}}),
     of({"a": {"$ref": "#/$defs/d0"}}, **{"$defs": {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"},
                                                                       {"type": "null"}]} for i in range(10)}
                                         | {"d10": {"type": "integer"}}}),
     "its chain of `$ref`s nests more than 10 levels"),   # through anyOf branches too
])
def test_a_schema_past_openai_s_limits_is_a_400_at_the_limit_not_below(accepted, past, words):
    assert local_schema(accepted, PARAM) is accepted
    error = refused(past)
    assert error.code == "unsupported_parameter" and words in error.message, error.message


@pytest.mark.parametrize("name,schema", [
    ("repro_enum 4000", enum_of(4000)),
    ("enum100k", enum_of(100_000)),
    ("props10000", of({f"p{i}": {"type": "string"} for i in range(10_000)})),
    ("anyofw10000", of({"a": {"anyOf": [of({f"k{i}": {"type": "integer"}}) for i in range(10_000)]}})),
    ("ref_chain 10000", ref_chain(10_000)),
    ("repro_refchain 64", ref_chain(64)),
])
def test_qa134_s_stalling_schemas_are_refused_at_the_door(name, schema):
    """Each was accepted and then stalled every tenant 6-14 s (or for hours), or (the
    64-hop chain) gave `{"a": "g@O:..."}` where an object is required."""
    assert refused(schema).code == "unsupported_parameter", name


REF_LOOP = {**of({"a": {"$ref": "#/$defs/a"}}), "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}}


@pytest.mark.parametrize("schema,place", [
    (REF_LOOP, "properties.a"),   # QA134 ref_loop: was a free string
    ({**of({"a": {"$ref": "#/$defs/a"}}), "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}]}}},
     "properties.a"),   # was a RecursionError in the reader
    ({"$ref": "#"}, ""),
])
def test_a_ref_cycle_that_ends_nowhere_is_a_400_with_the_caller_s_code(schema, place):
    error = refused(schema, "invalid_function_parameters")
    assert error.code == "invalid_function_parameters" and "lead back to where they started" in error.message
    assert (f"at '{place}'" in error.message) if place else " at " not in error.message


class Leaf(BaseModel):
    size: Literal[tuple(f"s{i}" for i in range(MAX_ENUM_VALUES - 10))]   # type: ignore[valid-type]


class Level3(BaseModel):
    leaves: list[Leaf]
    note: Optional[str]


class Level2(BaseModel):
    three: Optional[Level3]
    many: list[Level3]


class Level1(BaseModel):
    two: Level2
    also: Optional[Level2]


class Top(BaseModel):
    one: Level1
    tag: Literal["a", "b"] = "a"


@pytest.mark.parametrize("schema", SCHEMAS + [to_strict_json_schema(Top), Top.model_json_schema(),
                                              pydantic_function_tool(Top)["function"]["parameters"]])
def test_the_openai_sdk_s_pydantic_schemas_keep_working(schema):
    """Nested, recursive and mutually recursive models, a 990-value `Literal`: each
    `$ref` to a model is one hop, the model's own parts counted where it is written."""
    assert local_schema(schema, PARAM) is not None


def test_an_all_of_cycle_is_refused_as_the_validator_would_follow_it_for_ever():
    """QA139: kept before, a reply to it that parsed was validated into a RecursionError."""
    schema = {**of({"a": {"$ref": "#/$defs/a"}}), "$defs": {"a": {"allOf": [{"$ref": "#/$defs/a"}], "type": "integer"}}}
    assert "lead back" in refused(schema).message


def test_an_allof_chain_of_duplicate_refs_counts_its_hops():
    """QA139 H2: `allOf` chains of the same `$ref` twice passed the limits (only `anyOf`
    and `oneOf` counted as a chain), and validating a reply against one doubled per level."""
    def chain(depth: int) -> dict:
        defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2} for i in range(depth)}
        defs[f"d{depth}"] = {"type": "object"}
        return {"$defs": defs, "type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "required": ["a"]}
    assert local_schema(chain(4), PARAM)
    assert "nests more than" in refused(chain(40), "unsupported_parameter").message


def strings(num_items: int, min_length: int, **item) -> dict:
    """QA134 bigstr: an array of `num_items` strings of `min_length` characters at least."""
    return of({"a": {"type": "array", "minItems": num_items,
                     "items": {"type": "string", "minLength": min_length, **item}}})


@pytest.mark.parametrize("schema,is_refused", [
    (strings(10, 100_000), False),   # exactly MAX_SMALLEST_CHARS
    (strings(11, 100_000), True),
    (strings(500, 100_000), True),   # QA134 H3: a 50 MB reply for max_tokens 4
    (strings(100_000 - 1, 100_000), True),   # 10^10 characters passed both older checks
    (strings(500, 100_000, type=["string", "null"]), False),   # null is its smallest
    (of({"a": {"anyOf": [strings(500, 100_000), {"type": "integer"}]}}), False),   # the integer branch
    (of({"a": {"type": "array", "minItems": 1001, "items": {"const": "x" * 1000}}}), True),
    (strings(500, 100_000) | {"required": []}, False),   # nothing required
])
def test_a_smallest_value_of_more_than_a_million_characters_is_a_400(schema, is_refused):
    assert MAX_SMALLEST_CHARS == 1_000_000
    if not is_refused:
        assert local_schema(schema, PARAM) is schema
        return
    error = refused(schema)
    assert error.code == "invalid_value" and "1,000,000 characters" in error.message


async def test_prepare_chat_refuses_it_before_anything_is_rendered():
    """The stand-in engine has no tokenizer: a prompt rendered would fail; the 400 comes first."""
    request = _chat(messages=SAY_JSON, max_tokens=20, response_format={
        "type": "json_schema", "json_schema": {"name": "n", "schema": enum_of(4000)}})
    with pytest.raises(ApiError) as caught:
        await backend(False).prepare_chat(request, "t", "r1")
    assert (caught.value.status, caught.value.code, caught.value.param) == (
        400, "unsupported_parameter", "response_format.json_schema.schema")


@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "json"}], "max_tokens": 4,
                              "response_format": {"type": "json_schema",
                                                  "json_schema": {"name": "x", "schema": strings(500, 100_000)}}},
     "response_format.json_schema.schema"),
    ("/v1/responses", {"input": "json", "max_output_tokens": 16, "text": {"format": {
        "type": "json_schema", "name": "x", "schema": ref_chain(64)}}}, "text.format.schema"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "call"}], "max_tokens": 16,
                              "tool_choice": "required", "tools": [
                                  {"type": "function", "function": {"name": "f", "parameters": REF_LOOP}}]},
     "tools[0].function.parameters"),
], ids=["chat_bigstr", "responses_refchain", "chat_tool_ref_loop"])
def test_over_http_a_schema_past_a_limit_is_a_short_400(gateway, path, body, param):
    response = httpx.post(f"{gateway.base_url}{path}", headers=gateway.headers("alpha"), timeout=60,
                          json={"model": "tiny", **body})
    assert response.status_code == 400, response.text[:300]
    error = json.loads(response.content)["error"]
    assert error["param"] == param
    assert error["code"] in ("invalid_value", "unsupported_parameter", "invalid_function_parameters")
    assert len(response.content) < 2000


def test_the_schema_checker_given_is_the_one_used_though_empty():
    """QA139 H1: `(schemas or SchemaChecker())` made a new checker whenever the one given was
    empty (it has a length), so a response_format's schema was never remembered as checked."""
    from gateway.reply_format import reply_schema
    from gateway.schema_checks import SchemaChecker
    from gateway.schemas import ChatCompletionRequest, validate

    checker = SchemaChecker()
    request = validate(ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": "json"}],
                                               "response_format": {"type": "json_schema", "json_schema": {
                                                   "name": "x", "schema": of({"a": {"type": "string"}})}}})
    reply_schema(request, "t", checker)
    assert len(checker) == 1
