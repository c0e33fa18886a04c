"""Schema walking costs near-linear work in the schema's size (QA134 H1, H2, H5): an
`anyOf` whose branches are the same `$ref`, nested D deep, is walked once per part, not
2^D times; an `enum` of N members is checked in O(N), not O(N²); a large character class
is read a few times per spelling, not once per candidate character. Costs are counted (a
wrapper that stops the walk past a budget), never timed."""
import asyncio
import json
import math
import random
from re import _constants as sre
from re import _parser as sre_parse

import pytest
import regex

from gateway import json_fitting, json_patterns, json_schemas
from gateway.json_fitting import fits_own_keywords, json_equal
from gateway.json_patterns import HeldPattern, match_within
from gateway.json_schemas import SchemaRoot, listed_values
from gateway.schema_keywords import is_steerable
from gateway.tool_forcing import forced_json


class OverBudget(Exception):
    pass


def counted(monkeypatch, owner, name: str, budget: int) -> list[int]:
    """Counts calls of `owner.name`; past `budget` the call raises OverBudget (so a walk
    that would take 2^40 steps stops at once)."""
    real, calls = getattr(owner, name), [0]

    def counting(*args, **kwargs):
        calls[0] += 1
        if calls[0] > budget:
            raise OverBudget(f"{name}: over {budget} calls")
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, name, counting)
    return calls


def same_ref_branches(depth: int, sibling: bool = False, keyword: str = "anyOf") -> dict:
    """QA134 H1: $defs.d{i} = anyOf [$ref d{i+1}, $ref d{i+1}] (2^depth paths)."""
    def ref(i: int) -> dict:
        return {"$ref": f"#/$defs/d{i}", **({"description": "again"} if sibling else {})}
    defs = {f"d{i}": {keyword: [ref(i + 1), ref(i + 1)]} for i in range(depth)}
    defs[f"d{depth}"] = {"type": "object"}
    return {"$defs": defs, "type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "required": ["a"]}


def fill(schema: dict, answer: str = "") -> str:
    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return answer

    async def stream(suffix: str, max_tokens: int, stop: tuple[str, ...]):
        yield ""

    async def run() -> str:
        return "".join([piece async for piece in forced_json(schema, generate, 16, stream)])
    return asyncio.run(run())


@pytest.mark.parametrize("sibling", [False, True])
@pytest.mark.parametrize("keyword", ["anyOf", "oneOf"])
def test_same_ref_branches_nested_40_deep_are_walked_once_per_part(monkeypatch, sibling, keyword):
    schema = same_ref_branches(40, sibling, keyword)
    calls = counted(monkeypatch, SchemaRoot, "branches", budget=2_000)
    root = SchemaRoot(schema)
    assert root.first_chars(root.resolve({"$ref": "#/$defs/d0"})) == "{"
    assert calls[0] <= 2 * 41
    assert is_steerable(schema) is False   # both branches start with "{"


def test_a_reply_for_same_ref_branches_30_deep_is_written_in_linear_steps(monkeypatch):
    schema = same_ref_branches(30)
    calls = counted(monkeypatch, SchemaRoot, "branches", budget=50_000)
    assert json.loads(fill(schema)) == {"a": {}}
    assert calls[0] < 50 * 31


def test_same_ref_branches_12_deep_fill_as_before():
    # small enough for the old walk (4,096 paths): the reply is unchanged
    assert json.loads(fill(same_ref_branches(12))) == {"a": {}}
    assert json.loads(fill(same_ref_branches(12, sibling=True))) == {"a": {}}


def test_first_chars_through_a_cycle_of_branches_are_all_the_cycles():
    defs = {"a": {"anyOf": [{"$ref": "#/$defs/b"}, {"type": "string"}]},
            "b": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "null"}, {"$ref": "#/$defs/b"}]}}
    root = SchemaRoot({"$defs": defs})
    a, b = root.resolve({"$ref": "#/$defs/a"}), root.resolve({"$ref": "#/$defs/b"})
    assert set(root.first_chars(a)) == set(root.first_chars(b)) == {'"', "n"}
    fresh = SchemaRoot({"$defs": defs})   # asked the other way round first
    assert set(fresh.first_chars(fresh.resolve({"$ref": "#/$defs/b"}))) == {'"', "n"}


def _first_chars_by_recursion(root: SchemaRoot, schema: dict) -> set[str]:
    options = root.options(schema)
    if options is not None:
        return {option[:1] for option in options}
    branches = root.branches(schema)
    if branches is not None:
        return set().union(*(_first_chars_by_recursion(root, b) for b in branches))
    return set("".join(json_schemas.FIRST_CHARS[k] for k in json_schemas.kinds_of(schema)))


def test_first_chars_are_what_recursing_into_every_branch_gives():
    rng = random.Random(39)
    leaves = [{"type": "string"}, {"type": "null"}, {"enum": [1, "x", None]}, {"const": True},
              {"type": ["array", "integer"]}, {}, {"properties": {}}]
    for _ in range(40):
        size = rng.randint(2, 12)
        defs = {f"d{i}": {rng.choice(["anyOf", "oneOf"]): [
            {"$ref": f"#/$defs/d{rng.randint(i + 1, size)}"} if rng.random() < 0.6 and i < size
            else rng.choice(leaves) for _ in range(rng.randint(1, 3))]} for i in range(size)}
        defs[f"d{size}"] = rng.choice(leaves)
        root = SchemaRoot({"$defs": defs})
        parts = [root.resolve({"$ref": f"#/$defs/d{i}"}) for i in range(size + 1)]
        for part in rng.sample(parts, len(parts)):
            assert set(root.first_chars(part)) == _first_chars_by_recursion(SchemaRoot({"$defs": defs}), part)


def test_an_enum_of_8000_members_is_checked_in_linear_steps(monkeypatch):
    members = [f"v{i}" for i in range(8000)]
    calls = counted(monkeypatch, json_fitting, "json_equal", budget=100_000)
    assert listed_values({"enum": members}) == members
    assert listed_values({"enum": members, "pattern": "^v1"}) == [m for m in members if m.startswith("v1")]
    schema = {"type": "object", "properties": {"a": {"enum": members}}, "required": ["a"]}
    assert json.loads(fill(schema, '"v7999"')) == {"a": "v7999"}
    assert json.loads(fill(schema, "nothing listed")) == {"a": "v0"}
    assert calls[0] < 100


def test_a_roots_listed_values_are_worked_out_once_per_part(monkeypatch):
    calls = counted(monkeypatch, json_schemas, "listed_values", budget=1_000)
    part = {"enum": ["c", "f", 3]}
    root = SchemaRoot({"properties": {"unit": part}})
    for _ in range(5):
        assert root.options(part) == ('"c"', '"f"', "3")
        assert set(root.first_chars(part)) == {'"', "3"}
    assert calls[0] == 1


def test_a_pattern_is_compiled_once_per_part_for_all_the_values_it_holds(monkeypatch):
    calls = counted(monkeypatch, json_patterns, "bounded_engine", budget=1_000)
    schema = {"type": "object", "required": ["a"], "properties": {"a": {
        "type": "array", "minItems": 8, "items": {"type": "string", "pattern": "^[xy]{3}$"}}}}
    assert json.loads(fill(schema, "nope")) == {"a": ["xxx"] * 8}
    assert calls[0] <= 4


ENUM_VALUES = [1, 1.0, True, False, 0, "1", None, [1], [1.0], [True], {"a": 1}, {"a": 1.0}, {"a": True},
               {"a": 1, "b": 2}, [], {}, "", -0.0, 2 ** 60, float(2 ** 60), 2 ** 60 + 1, math.nan, [math.nan],
               {"a": [1, {"b": None}]}, math.inf]


@pytest.mark.parametrize("enum", [ENUM_VALUES, [1, "x"], [True], [[1.0, {"b": None}]], [math.nan, 0]])
def test_enum_membership_is_json_equality(enum):
    schema = {"enum": enum}
    own = json_fitting.OwnKeywords(schema)
    for value in ENUM_VALUES + [{"a": [1.0, {"b": None}]}, [1, 2], "v"]:
        expected = any(json_equal(value, member) for member in enum)
        assert own.fits(value) is expected is fits_own_keywords(value, schema), value


def test_enum_members_that_are_no_json_values_are_still_compared():
    member = (1, 2)   # not JSON: compared one by one, as before
    assert json_fitting.OwnKeywords({"enum": [member, 3]}).fits((1, 2))
    assert not json_fitting.OwnKeywords({"enum": [member, 3]}).fits((1, 3))


class CountingItems(list):
    """A character class's items that count how many are read."""

    read = 0

    def __iter__(self):
        for item in super().__iter__():
            CountingItems.read += 1
            yield item


def _held_with_counted_class(pattern: str) -> HeldPattern:
    tree = sre_parse.parse(pattern)
    for at, (op, value) in enumerate(tree.data):
        if op is sre.MAX_REPEAT:
            body = value[2]
            [(item_op, items)] = body.data
            assert item_op is sre.IN
            body.data[0] = (sre.IN, CountingItems(items))
    return HeldPattern(pattern, regex.compile(pattern, regex.V0), tree)


def test_a_class_of_3000_characters_is_read_a_few_times_per_spelling():
    size = 3000
    chars = "".join(chr(0x100 + 2 * i) for i in range(size))
    held = _held_with_counted_class(f"^[{chars}]{{5}}$")
    CountingItems.read = 0
    assert match_within(held, 0, None) == chr(0x100) * 5
    assert match_within(held, 0, 4) is None
    assert CountingItems.read <= 6 * size


def test_a_large_class_pattern_fills_as_before():
    chars = "".join(chr(0x100 + 2 * i) for i in range(3000))
    schema = {"type": "object", "properties": {"a": {"type": "string", "pattern": f"^[{chars}]{{5}}$"}},
              "required": ["a"]}
    assert json.loads(fill(schema, "abc")) == {"a": chr(0x100) * 5}
    ranges = {"type": "object", "required": ["a"],
              "properties": {"a": {"type": "string", "pattern": "^[^a-z\\d][\\w\\s]$"}}}
    assert json.loads(fill(ranges, "q")) == {"a": "Aa"}
