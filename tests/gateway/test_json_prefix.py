"""The JSON reader: known answers for what is final (committed) and where text strays."""
import pytest

from gateway.json_frames import ArrayFrame, ObjectFrame, StringFrame
from gateway.json_prefix import JsonPrefix

SCHEMA = {"type": "object", "additionalProperties": False,
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                         "temp": {"type": "number"},
                         "unit": {"enum": ["c", "cc", "f"]}, "ok": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
                         "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                         "where": {"$ref": "#/$defs/Where"}},
          "required": ["city"],
          "$defs": {"Where": {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}}}


def committed(text: str, schema: dict = SCHEMA) -> str:
    reply = JsonPrefix(schema).feed(text)
    assert not reply.has_deviated, text
    return reply.text[:reply.num_committed]


@pytest.mark.parametrize("text,final", [
    ("", ""),
    ("  {", "{"),                                   # leading whitespace is not part of the reply
    ('{"ci', "{"),                                  # a partial key is held back
    ('{"city"', "{"),
    ('{"city": ', '{"city": '),                     # after the colon: the filler can give the value
    ('{"city": "Par', '{"city": "Par'),             # inside a plain string: sent as it comes
    ('{"city": "Pa\\', '{"city": "Pa'),             # but not half an escape
    ('{"city": "Paris", "days": 1', '{"city": "Paris", "days": '),   # a number is held until it ends
    ('{"city": "Paris", "days": 12,', '{"city": "Paris", "days": 12'),
    ('{"city": "P", "unit": "c', '{"city": "P", "unit": '),          # an enum value until whole
    ('{"city": "P", "unit": "c"', '{"city": "P", "unit": "c"'),
    ('{"city": "P", "ok": tr', '{"city": "P", "ok": '),
    ('{"city": "P", "ok": true', '{"city": "P", "ok": true'),
    ('{"city": "P", "tags": ["a", "b"', '{"city": "P", "tags": ["a", "b"'),
    ('{"city": "P", "where": {"lat": 4.5', '{"city": "P", "where": {"lat": '),
    ('{"city": "P", "note": nu', '{"city": "P", "note": '),
    ('{"city": "P", "note": "x', '{"city": "P", "note": "x'),
])
def test_json_prefix_commits_only_what_the_filler_can_complete(text, final):
    assert committed(text) == final


@pytest.mark.parametrize("text", [
    '{"town"',                         # a key the closed schema lacks
    '{"city": "P", "city"',            # a key twice
    '{"days": 3}',                     # `}` before the required city
    '{"city": 3',                      # a number where a string belongs
    '{"city": "a\nb"',                 # a raw newline inside a string
    '{"city": "P", "days": 1.5',       # a fraction in an integer
    '{"city": "P", "unit": "x',        # not an enum member
    '{"city": "P", "tags": []',        # fewer than minItems
    '{"city": "P", "tags": ["a", "b", "c"',   # more than maxItems
    '{"city": "P", "note": 5',         # no anyOf branch starts so
    '{"city": "P", "where": {}',       # the referenced schema's required lat
    '[1]',                             # the root is an object
])
def test_json_prefix_stops_where_the_text_strays(text):
    reply = JsonPrefix(SCHEMA).feed(text)
    assert reply.has_deviated and not reply.is_complete
    assert len(reply.text) < len(text)
    assert reply.feed('"more"').text == reply.text   # later text is ignored


def test_json_prefix_completes_at_the_closing_brace_and_ignores_what_follows():
    reply = JsonPrefix(SCHEMA)
    for piece in ['{"city"', ': "Oslo", "tem', 'p": -1.5e', '2, "unit": "cc"', "}\n</tool_call>"]:
        reply.feed(piece)
    assert reply.is_complete and not reply.has_deviated
    assert reply.text == reply.text[:reply.num_committed] == '{"city": "Oslo", "temp": -1.5e2, "unit": "cc"}'


@pytest.mark.parametrize("text,strays", [('"a\\"b\\u00e9\\n\\/', False), ('"a\\x', True), ('"\\u00g', True)])
def test_json_prefix_reads_string_escapes(text, strays):
    reply = JsonPrefix(SCHEMA).feed('{"city": ' + text)
    assert reply.has_deviated is strays
    if not strays:
        assert isinstance(reply.frames[-1], StringFrame) and reply.frames[-1].escape is None
        assert reply.committed() == '{"city": ' + text


def test_json_prefix_frames_describe_the_open_values():
    reply = JsonPrefix(SCHEMA).feed('{"city": "P", "tags": ["a", ')
    outer, tags = reply.frames
    assert isinstance(outer, ObjectFrame) and outer.phase == "value" and outer.key == "tags"
    assert outer.seen == ["city"]
    assert isinstance(tags, ArrayFrame) and tags.count == 1 and tags.phase == "value"


def test_json_prefix_of_an_open_schema_takes_any_json():
    reply = JsonPrefix({"type": "object"}).feed('{"a": [1, {"b": null}], "c": "d", "e": false}')
    assert reply.is_complete


@pytest.mark.parametrize("schema,takes_other_keys", [
    ({"type": "object", "properties": {"a": {}}}, False),       # names properties: only those
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": True}, True),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": False}, False),
    ({"type": "object"}, True),                                 # names none: any
])
def test_json_prefix_takes_unnamed_keys_only_where_the_schema_allows_them_explicitly(schema, takes_other_keys):
    reply = JsonPrefix(schema).feed('{"type": "object"}')
    assert reply.is_complete is takes_other_keys and reply.has_deviated is not takes_other_keys


BOUNDED = {"type": "object", "properties": {
    "n": {"type": "integer", "minimum": 1, "maximum": 5}, "w": {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5},
    "s": {"type": "string", "minLength": 2, "maxLength": 4}}}


@pytest.mark.parametrize("text,strays,final", [
    ('{"n": 5,', False, '{"n": 5'), ('{"n": 7,', True, '{"n": '), ('{"n": 0}', True, '{"n": '),
    ('{"w": 1.5}', False, '{"w": 1.5}'), ('{"w": 0,', True, '{"w": '), ('{"w": 1.2}', True, '{"w": '),
    ('{"s": "ab"}', False, '{"s": "ab"}'), ('{"s": "abcd', False, '{"s": "abcd'),
    ('{"s": "abcde', True, '{"s": "abcd'), ('{"s": "a"', True, '{"s": "a'),
    ('{"s": "\\u00e9\\n\\"x"}', False, '{"s": "\\u00e9\\n\\"x"}'),   # an escape counts as one character
    ('{"s": "abc\\n"', False, '{"s": "abc\\n"'), ('{"s": "abcd\\n', True, '{"s": "abcd'),
    ('{"s": "ab\\', False, '{"s": "ab'),
])
def test_bounds_and_lengths_are_read_as_values_end(text, strays, final):
    """A number out of its bounds strays where it ends (before it is sent); a string strays
    at the character past its `maxLength`, or at a quote short of its `minLength`."""
    reply = JsonPrefix(BOUNDED).feed(text)
    assert reply.has_deviated is strays and reply.text[:reply.num_committed] == final
