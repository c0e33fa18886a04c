"""Which schemas the reader steers exactly, and how it resolves references and branches."""
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, Field

from gateway.json_schemas import SchemaRoot, kinds_of
from gateway.schema_keywords import is_steerable


class Where(BaseModel):
    lat: float
    lon: float


class Report(BaseModel):
    city: str
    unit: Literal["c", "f"]
    where: Where
    stops: list[Where]
    note: Optional[str] = None


class Bounded(BaseModel):
    name: str = Field(min_length=2, max_length=8)
    stars: int = Field(ge=1, le=5)
    weight: float = Field(gt=0, multiple_of=0.5)


PATTERNED = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=[A-Z])[A-Z]{3}$"}}}


def test_is_steerable_takes_what_pydantic_writes_for_plain_models():
    assert is_steerable(Report.model_json_schema())   # $defs/$ref, enum, Optional as anyOf with null


def test_is_steerable_takes_bounds_and_lengths():
    assert is_steerable(Bounded.model_json_schema())   # the reader checks them as values end


def test_is_steerable_takes_patterns_it_can_spell():
    class Code(BaseModel):
        code: str = Field(pattern=r"^[A-Z]{3}-\d+$")

    assert is_steerable(Code.model_json_schema())


@pytest.mark.parametrize("schema", [
    PATTERNED,                                                         # a look-ahead: not spelled, not held
    {"type": "object", "properties": {"n": {"type": "string", "pattern": "(a)\\1"}}},           # a back-reference
    {"type": "object", "properties": {"n": {"anyOf": [{"type": "integer"}, {"type": "number"}]}}},  # same first chars
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"t": {"type": "array", "items": [{"type": "string"}]}}},
    {"type": "object", "properties": {"x": {"$ref": "#/$defs/Missing"}}},
    {"type": "object", "properties": {"x": {"type": "decimal"}}},
    {"allOf": [{"type": "object"}]},
])
def test_is_steerable_refuses_constraints_the_reader_cannot_decide(schema):
    assert not is_steerable(schema)


def test_is_steerable_ends_on_recursive_references():
    tree = {"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}}}
    assert is_steerable(tree)


def test_is_steerable_walks_a_long_chain_of_defs_without_recursion():
    """Known hazard (F7, session 46): a 2,000-`$defs` chain raised RecursionError."""
    defs = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(3000)}
    defs["d3000"] = {"type": "string"}
    chain = {"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "$defs": defs}
    assert is_steerable(chain)
    defs["d3000"] = {"type": "string", "pattern": "(a)\\1"}   # undecidable at the far end
    assert not is_steerable(chain)


def test_schema_root_resolves_references_and_picks_branches_by_first_char():
    schema = Report.model_json_schema()
    root = SchemaRoot(schema)
    assert root.member_schema(schema, "where")["properties"]["lat"] == {"title": "Lat", "type": "number"}
    note = root.member_schema(schema, "note")
    assert root.branch(note, '"') == {"type": "string"}
    assert root.branch(note, "n") == {"type": "null"}
    assert root.branch(note, "{") is None
    assert root.options(root.member_schema(schema, "unit")) == ('"c"', '"f"')


@pytest.mark.parametrize("schema,kinds", [
    ({"type": "string"}, {"string"}), ({"type": ["integer", "null"]}, {"integer", "null"}),
    ({"properties": {}}, {"object"}), ({"items": {}}, {"array"}),
    ({}, {"object", "array", "string", "number", "integer", "boolean", "null"}),
])
def test_kinds_of_reads_type_or_what_keywords_imply(schema, kinds):
    assert kinds_of(schema) == kinds
