"""Clients' JSON Schemas as local models write to them: boolean subschemas rewritten to
objects that take the same values, unmeetable ones refused by name."""
import copy
import json
import random

import pytest
from jsonschema import Draft202012Validator

from gateway.errors import ApiError
from gateway.json_filling import MAX_DEPTH, JsonText, LeafFiller
from gateway.json_schemas import unresolvable_ref
from gateway.local_schemas import local_schema
from gateway.tool_forcing import forced_json, is_valid

PARAM = "tools[0].function.parameters"


def refused(schema: dict) -> ApiError:
    with pytest.raises(ApiError) as caught:
        local_schema(schema, PARAM, "invalid_function_parameters")
    assert caught.value.status == 400 and caught.value.param == PARAM
    return caught.value


@pytest.mark.parametrize("ref", ["#/$defs/Missing", "https://example.com/schema.json"])
def test_a_schema_whose_reference_does_not_resolve_is_refused_by_name(ref):
    schema = {"type": "object", "properties": {"a": {"$ref": ref}}, "$defs": {"Here": {"type": "string"}}}
    assert unresolvable_ref(schema) == ref
    good = {"type": "object", "properties": {"a": {"$ref": "#/$defs/Here"}}, "$defs": {"Here": {"type": "string"}}}
    assert local_schema(good, PARAM) is good
    error = refused(schema)
    assert error.code == "unsupported_parameter" and ref in error.message


@pytest.mark.parametrize("schema, place, words", [
    ({"type": "object", "properties": {"a": {"type": "integer", "minimum": 10, "maximum": 1}}},
     "properties.a", "no integer lies between the bounds 10 and 1"),
    ({"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": 1, "exclusiveMaximum": 2}}},
     "properties.a", "no integer"),
    ({"type": "object", "properties": {"a": {"type": "number", "minimum": 2, "exclusiveMaximum": 2}}},
     "properties.a", "the lower bound 2 is not below the upper bound 2"),
    ({"type": "object", "properties": {"a": {"type": "array", "minItems": 5, "maxItems": 2}}},
     "properties.a", "'minItems' (5) is above 'maxItems' (2)"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 1}}},
     "properties.a", "'minLength' (3) is above 'maxLength' (1)"),
    ({"type": "object", "properties": {"a": {"enum": []}}}, "properties.a", "'enum' is empty"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "root", "'a' has the schema false"),
    ({"type": "object", "minProperties": 2, "maxProperties": 1}, "root", "'minProperties' (2)"),
    ({"type": "object", "properties": {"a": {"type": "array",
                                             "items": {"type": "string", "minLength": 2, "maxLength": 0}}}},
     "properties.a.items", "'minLength' (2)"),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/B"}},
      "$defs": {"B": {"type": "integer", "minimum": 5, "maximum": 4}}}, "$defs.B", "no integer"),
    # QA62: each of these was written anyway, and the reply broke the schema
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "zzz"],
      "additionalProperties": False}, "root", "'zzz' is not in 'properties' and 'additionalProperties' is false"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": False, "minItems": 1}}},
     "properties.a", "'items' is false and 'minItems' is 1"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": False, "minItems": 3,
                                             "prefixItems": [{"type": "integer"}, {"type": "string"}]}}},
     "properties.a", "'items' is false after 2 'prefixItems' and 'minItems' is 3"),
    ({"type": "object", "properties": {"a": {"type": "integer", "const": 5, "minimum": 10}}},
     "properties.a", "'const' does not meet"),
    ({"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 2, "x"], "minimum": 10}}},
     "properties.a", "no member of 'enum' meets"),
    ({"type": "object", "properties": {"a": {"type": "string", "enum": ["abcd"], "maxLength": 2}}},
     "properties.a", "no member of 'enum' meets"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9}}},
     "properties.a", "no multiple of 10 lies between the bounds 1 and 9"),
    ({"type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.5, "minimum": 0.6, "maximum": 0.9}}},
     "properties.a", "no multiple of 0.5"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "^[a-z]{3}$", "maxLength": 2}}},
     "properties.a", "every string 'pattern' matches is longer than 'maxLength' (2)"),
])
def test_a_schema_part_of_which_no_value_meets_is_refused_naming_the_place(schema, place, words):
    error = refused(schema)
    assert error.code == "invalid_function_parameters"
    assert (f"at '{place}'" if place != "root" else "at its root") in error.message and words in error.message


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"a": {"type": ["integer", "null"], "minimum": 10, "maximum": 1}}},
    {"type": "object", "properties": {"a": {"type": ["integer", "string"], "minimum": 10, "maximum": 1}}},
    {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1.5, "maximum": 2}}},
    {"type": "object", "properties": {"a": {"type": "number", "minimum": 2, "maximum": 2}}},
    {"type": "object", "properties": {"a": {"minimum": 10, "maximum": 1}}},   # any type: strings fit
    {"type": "object", "properties": {"a": {"type": "string", "minimum": 10, "maximum": 1}}},
    {"type": "object", "properties": {"a": False}},   # optional: the key is forbidden, the object fine
    {"type": "object", "required": ["zzz"], "additionalProperties": False, "patternProperties": {"^z": {}}},
    {"type": ["object", "string"], "required": ["zzz"], "additionalProperties": False},   # a string fits
    {"type": "object", "properties": {"a": {"items": False, "minItems": 1}}},   # no type: a string fits
    {"type": "object", "properties": {"a": {"type": "integer", "enum": [1, 50], "minimum": 10}}},
    {"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 10}}},
    {"type": "object", "properties": {"a": {"type": "number", "multipleOf": 1e-320, "minimum": 0.5}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]{2}", "maxLength": 2}}},
    # QA72: a non-object meets `required`; floats a hair off a multiple are one
    {"type": "object", "properties": {"n": {"type": ["object", "null"], "properties": {"a": False}, "required": ["a"]}}},
    {"type": "object", "properties": {"p": {"type": "number", "multipleOf": 0.1, "minimum": 0.3, "maximum": 0.3}}},
    {"type": "object", "properties": {"p": {"type": "number", "multipleOf": 0.1, "const": 0.3}}},
])
def test_a_schema_some_value_meets_is_kept(schema):
    before = copy.deepcopy(schema)
    assert isinstance(local_schema(schema, PARAM), dict)
    assert schema == before


def test_without_boolean_subschemas_the_schema_itself_comes_back():
    schema = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": False}},
              "additionalProperties": True}
    assert local_schema(schema, PARAM) is schema


BOOLEAN_SCHEMAS = [
    {"type": "object", "properties": {"a": True, "b": {"type": "integer"}}, "required": ["a", "b"]},
    {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}, "required": ["b"]},
    {"type": "object", "properties": {"a": False, "b": {"type": "integer"}}, "additionalProperties": True},
    {"type": "object", "properties": {"a": {"type": "array", "items": False}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"type": "array", "items": True}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"anyOf": [False, {"type": "string"}]}}, "required": ["a"]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/T"}, "b": {"$ref": "#/$defs/F"}},
     "$defs": {"T": True, "F": False}, "required": ["a"]},
]
VALUES = [{}, {"a": 1}, {"b": 2}, {"a": 1, "b": 2}, {"a": None, "b": 2}, {"a": "x"}, {"a": []}, {"a": [1]},
          {"b": 2, "c": 3}, {"a": {"x": 1}, "b": 0}, {"b": "x"}]


@pytest.mark.parametrize("schema", BOOLEAN_SCHEMAS)
def test_boolean_subschemas_are_rewritten_to_take_exactly_the_same_values(schema):
    before = copy.deepcopy(schema)
    rewritten = local_schema(schema, PARAM)
    assert schema == before and rewritten is not schema
    assert "True" not in repr(rewritten.get("properties")) and "False" not in repr(rewritten.get("properties"))
    Draft202012Validator.check_schema(rewritten)
    for value in VALUES:
        assert Draft202012Validator(rewritten).is_valid(value) == Draft202012Validator(schema).is_valid(value), value


@pytest.mark.parametrize("schema", BOOLEAN_SCHEMAS)
@pytest.mark.parametrize("seed", range(3))
async def test_a_reply_for_a_schema_with_boolean_subschemas_validates_against_the_original(schema, seed):
    rng = random.Random(seed)

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return rng.choice(['1', '"x"', 'true', '}', ']', '{"a": 1', 'null', 'zz'])

    reply = "".join([piece async for piece in forced_json(local_schema(schema, PARAM), generate, 64)])
    assert Draft202012Validator(schema).is_valid(json.loads(reply)), reply


def nested(levels: int) -> dict:
    """An object `levels` deep, each level's one property required; a boolean at the bottom."""
    schema: dict = {"type": "object", "properties": {"leaf": {"type": "boolean"}}, "required": ["leaf"]}
    for level in range(levels - 1):
        schema = {"type": "object", "properties": {f"k{level}": schema}, "required": [f"k{level}"]}
    return schema


@pytest.mark.parametrize("levels", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 4, 40])
async def test_objects_nested_past_the_filled_depth_keep_their_required_properties(levels):
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return "true"

    schema = nested(levels)
    text = "".join([piece async for piece in LeafFiller(schema, generate, JsonText("")).root_object()])
    assert is_valid(json.loads(text), schema), text
    assert text.count("{") == levels


async def test_arrays_nested_past_the_filled_depth_keep_their_min_items():
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return "zz"

    schema = nested(MAX_DEPTH)
    schema["properties"]["k2"]["properties"]["k1"]["properties"]["k0"] = {
        "type": "array", "minItems": 2, "items": {"type": "object", "properties": {"d": {"type": "boolean"}},
                                                  "required": ["d"]}}
    text = "".join([piece async for piece in forced_json(schema, generate, 64)])
    value = json.loads(text)
    assert is_valid(value, schema) and value["k2"]["k1"]["k0"] == [{"d": False}, {"d": False}]


def test_a_schema_no_finite_value_meets_is_a_400_naming_the_parameter():
    loop = {"type": "object", "properties": {"name": {"type": "string"}, "next": {"$ref": "#"}},
            "required": ["name", "next"]}
    with pytest.raises(ApiError) as caught:
        local_schema(loop, "response_format.json_schema.schema")
    assert caught.value.param == "response_format.json_schema.schema"
    assert "at its root" in caught.value.message and "no finite value" in caught.value.message
    nullable = {**loop, "properties": {**loop["properties"], "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
    assert local_schema(nullable, "p") is nullable


def _required_chain(links: int) -> dict:
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}, "required": ["x"]}
            for i in range(links)}
    defs[f"d{links}"] = {"type": "string"}
    return {"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "required": ["a"], "$defs": defs}


async def test_a_schema_whose_smallest_value_nests_too_deep_is_a_400_not_an_invalid_reply():
    """Known hazard (session 47): a chain of 100 required `$defs` was filled 69 levels
    deep and cut there: a 200 whose arguments broke the schema."""
    from gateway.json_heights import MAX_SMALLEST_HEIGHT

    with pytest.raises(ApiError) as caught:
        local_schema(_required_chain(100), "tools[0].function.parameters")
    assert caught.value.status == 400 and caught.value.param == "tools[0].function.parameters"
    assert f"at most {MAX_SMALLEST_HEIGHT} deep" in caught.value.message and "nests 101 levels" in caught.value.message
    deepest = _required_chain(MAX_SMALLEST_HEIGHT - 1)   # the root is 64 high: filled whole

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return "z"

    text = "".join([piece async for piece in forced_json(local_schema(deepest, "p"), generate, 64)])
    assert is_valid(json.loads(text), deepest) and text.count("{") == MAX_SMALLEST_HEIGHT


def test_a_string_longer_than_local_models_write_is_refused_up_front_naming_the_place():
    # QA62: minLength 1e8 padded a 100 MB string on the event loop (every tenant stalled ~30 s)
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 100_000_000}}}
    error = refused(schema)
    assert error.code == "unsupported_parameter"
    assert "'minLength' at 'properties.s' is 100,000,000" in error.message and "100,000 characters" in error.message
    fits = {"type": "object", "properties": {"s": {"type": "string", "minLength": 100_000},
                                             "n": {"type": "integer", "minLength": 10**9}}}   # not a string: no pad
    assert local_schema(fits, PARAM) is fits


def test_a_tuple_of_prefix_items_with_items_false_is_a_schema_values_can_meet():
    """QA139 M1: `prefixItems` hold the items `items: false` does not bar (Draft 2020-12):
    two prefix items and `minItems: 2` was refused as a schema no value can meet."""
    schema = {"type": "object", "required": ["t"], "properties": {"t": {
        "type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False, "minItems": 2}}}
    assert local_schema(schema, "p") is not None
