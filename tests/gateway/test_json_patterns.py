"""Strings held to a `pattern`: the shortest string a pattern spells, the reader holding a
patterned string until it closes, and replies a pydantic client parses."""
import json
import re

import pytest
from pydantic import BaseModel, Field

from gateway.json_patterns import shortest_match, usable_pattern
from gateway.json_prefix import JsonPrefix
from gateway.tool_forcing import forced_json

PATTERNS = [r"^[A-Z]{3}$", r"^\d{3}-\d{4}$", r"^(foo|bar)+$", r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$", r"^\+?[1-9]\d{1,14}$",
            r"^[a-z0-9_-]{3,16}$", r"^#[0-9a-fA-F]{6}$", r"^v\d+\.\d+\.\d+$", r"^\S+$", r"[^a-z]", "abc", r"^$",
            r"^[A-Z][a-z]*( [A-Z][a-z]*)*$", r"(?i)^yes|no$", r"^(?:\w+\s){2}\w+$"]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_shortest_match_is_matched_by_its_pattern(pattern):
    spelled = shortest_match(usable_pattern({"pattern": pattern}))
    assert spelled is not None and re.search(pattern, spelled)


@pytest.mark.parametrize("pattern,spelled", [(r"^[A-Z]{3}$", "AAA"), (r"^\d{3}-\d{4}$", "000-0000"),
                                             (r"^v\d+\.\d+\.\d+$", "v0.0.0"), (r"^(foo|bar)+$", "foo")])
def test_shortest_match_known_answers(pattern, spelled):
    assert shortest_match(usable_pattern({"pattern": pattern})) == spelled


@pytest.mark.parametrize("pattern", [r"(?=x)y", r"(a)\1", r"x{5000}", "((a?){1000}){1000}", "(", 7,
                                     "a{99999999999999999999}", "(" * 500 + ")" * 500])
def test_patterns_that_cannot_be_spelled_or_compiled_are_not_held(pattern):
    assert usable_pattern({"type": "string", "pattern": pattern}) is None


CODE = {"type": "object", "properties": {"code": {"type": "string", "pattern": r"^[A-Z]{3}$"}, "note": {"type": "string"}}}


@pytest.mark.parametrize("text,strays,final", [
    ('{"code": "OS', False, '{"code": '), ('{"code": "OSL"', False, '{"code": "OSL"'),
    ('{"code": "oslo"', True, '{"code": '), ('{"note": "os', False, '{"note": "os')])
def test_a_patterned_string_is_sent_only_whole_and_matching(text, strays, final):
    reply = JsonPrefix(CODE).feed(text)
    assert reply.has_deviated is strays and reply.committed() == final


class Flight(BaseModel):
    code: str = Field(pattern=r"^[A-Z]{2}\d{3,4}$")
    gate: str = Field(pattern=r"^[A-H]\d{1,2}$")
    seat: str = Field(pattern=r"^\d{1,2}[A-F]$")


async def test_a_reply_with_patterned_fields_parses_in_the_client():
    """The model's free code does not match: it is asked again; a gate that still does not
    match takes the pattern's shortest string; a matching seat is kept."""
    from tests.gateway.test_tool_forcing import streamed

    answers = {'"code": "': "SK1234", '"gate": "': "gate 7", '"seat": "': "12C"}

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return next((a for k, a in answers.items() if suffix.endswith(k)), "\x00")

    free = streamed(['"code": "flight sk', '1234", "gate": "B1'], [])
    text = "".join([p async for p in forced_json(Flight.model_json_schema(), generate, 100, free)])
    assert Flight.model_validate_json(text) == Flight(code="SK1234", gate="A0", seat="12C")
    assert json.loads(text) == {"code": "SK1234", "gate": "A0", "seat": "12C"}
