"""Strings held to a format: known answers, the placeholders, the reader holding such a
string back until it closes, and whole replies a pydantic client parses into typed values."""
import datetime
import ipaddress
import json
import uuid

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from gateway.json_formats import PLACEHOLDERS, checked_format, fits_format, normalized
from gateway.json_prefix import JsonPrefix
from gateway.tool_forcing import forced_json


JSONSCHEMA_FORMATS = Draft202012Validator.FORMAT_CHECKER   # jsonschema's own, RFC 3339 for times


@pytest.mark.parametrize("fmt,text,fits", [
    ("date", "2024-02-29", True), ("date", "2023-02-29", False), ("date", "2024-1-5", False), ("date", "tomorrow", False),
    ("date-time", "2024-01-05T10:30:00Z", True), ("date-time", "2024-01-05T10:30:00.25+02:00", True),
    ("date-time", "2024-01-05T25:00:00Z", False), ("date-time", "2024-01-05 10:30", False),
    ("date-time", "2024-01-05T10:30:00", False),
    ("time", "23:59:59Z", True), ("time", "23:59:59", False), ("time", "24:00:00Z", False), ("uuid", "123e4567-e89b-12d3-a456-426614174000", True),
    ("uuid", "123e4567e89b12d3a456426614174000", False), ("email", "ada@example.org", True), ("email", "ada@", False),
    ("ipv4", "10.0.0.1", True), ("ipv4", "300.1.1.1", False), ("date", "\u0662\u0660\u0662\u0664-01-01", False)])
def test_fits_format_known_answers(fmt, text, fits):
    assert fits_format(text, fmt) is fits


@pytest.mark.parametrize("fmt,text,strict", [
    ("date", "3/20/2025", "2025-03-20"), ("date", "March 3rd, 2025", "2025-03-03"), ("date", " 2025-07-14 ", "2025-07-14"),
    ("date", "Monday, March 3rd 2025", "2025-03-03"), ("date", "2025-07-14T10:00:00Z", "2025-07-14"),
    ("date", "tomorrow", None), ("date", "13/45/2025", None),
    ("time", "10:00", "10:00:00Z"), ("time", "10am", "10:00:00Z"), ("time", "3:30 p.m.", "15:30:00Z"),
    ("time", "12am", "00:00:00Z"), ("time", "10:00+02:00", "10:00:00+02:00"), ("time", "13pm", None), ("time", "25:00", None),
    ("date-time", "2025-03-03 10:00", "2025-03-03T10:00:00Z"), ("date-time", "2025-03-03T10:00:00Z", "2025-03-03T10:00:00+00:00"),
    ("date-time", "soon", None), ("uuid", "123E4567E89B12D3A456426614174000", "123e4567-e89b-12d3-a456-426614174000"),
    ("uuid", "x", None), ("email", "nobody", None), ("ipv4", "1.2.3.400", None)])
def test_normalized_reads_plain_forms_into_the_strict_one(fmt, text, strict):
    got = normalized(text, fmt)
    assert got == strict and (got is None or fits_format(got, fmt) and JSONSCHEMA_FORMATS.conforms(got, fmt))


def test_every_placeholder_fits_its_format_and_other_formats_stay_annotations():
    assert all(fits_format(text, fmt) and JSONSCHEMA_FORMATS.conforms(text, fmt) for fmt, text in PLACEHOLDERS.items())
    assert checked_format({"type": "string", "format": "uri"}) is None and checked_format({"type": "string"}) is None


WHEN = {"type": "object", "properties": {"when": {"type": "string", "format": "date"}, "note": {"type": "string"}}}


@pytest.mark.parametrize("text,strays,final", [
    ('{"when": "2024-0', False, '{"when": '),              # held back until whole
    ('{"when": "2024-01-05"', False, '{"when": "2024-01-05"'),
    ('{"when": "tomorrow"', True, '{"when": '),             # strays at its end, before anything of it is sent
    ('{"note": "tomor', False, '{"note": "tomor'),         # a plain string is sent as it comes
])
def test_a_string_held_to_a_format_is_sent_only_whole_and_valid(text, strays, final):
    reply = JsonPrefix(WHEN).feed(text)
    assert reply.has_deviated is strays and reply.committed() == final


class Meeting(BaseModel):
    title: str
    day: datetime.date
    starts: datetime.datetime
    at: datetime.time
    id: uuid.UUID
    host: ipaddress.IPv4Address


@pytest.mark.parametrize("free,answers,expected", [
    ('"title": "Sync", "day": "next monday", "starts": "2024-01-05T10:00:00Z"}',
     {'"day": "': "January 8th, 2024", '"starts": "': "soon", '"at": "': "9:30am", '"id": "': "x", '"host": "': "10.1.2.3"},
     {"day": "2024-01-08", "starts": "1970-01-01T00:00:00Z", "at": "09:30:00Z",
      "id": PLACEHOLDERS["uuid"], "host": "10.1.2.3"}),
    ('"title": "Sync", "day": "2024-02-01", "starts": "2024-02-01T09:00:00Z", "at": "09:00:00Z", '
     '"id": "123e4567-e89b-12d3-a456-426614174000", "host": "127.0.0.1"}', {},
     {"day": "2024-02-01", "starts": "2024-02-01T09:00:00Z", "at": "09:00:00Z",
      "id": "123e4567-e89b-12d3-a456-426614174000", "host": "127.0.0.1"}),
])
async def test_a_reply_with_typed_fields_parses_in_the_client(free, answers, expected):
    """What pydantic's `parse` needs: a date the model wrote as words is asked again and
    read in its plain meaning; what still does not fit takes the format's placeholder."""
    from tests.gateway.test_tool_forcing import streamed

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return next((a for k, a in answers.items() if suffix.endswith(k)), "\x00")

    text = "".join([p async for p in forced_json(Meeting.model_json_schema(), generate, 100, streamed([free], []))])
    meeting = Meeting.model_validate_json(text)
    value = json.loads(text)
    assert meeting.title == "Sync" and {k: value[k] for k in expected} == expected


@pytest.mark.parametrize("seed", range(3))
async def test_a_typed_reply_parses_whatever_the_model_writes(seed):
    """Invariant: cut and garble a valid reply anywhere, answer leaves with noise: the
    client still parses the reply into the typed model."""
    import random

    from tests.gateway.test_tool_forcing import NOISE, streamed

    rng = random.Random(seed)
    valid = json.dumps({"title": "Sync", "day": "2024-02-01", "starts": "2024-02-01T09:00:00Z", "at": "09:00:00Z",
                        "id": "123e4567-e89b-12d3-a456-426614174000", "host": "127.0.0.1"})[1:]
    for _ in range(80):
        cut = rng.randrange(len(valid) + 1)
        free = valid[:cut] + "".join(rng.choice(NOISE) for _ in range(rng.randrange(3)))

        async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
            text = "".join(rng.choice(NOISE + ["2024-01-0", "1", ":00", "x"]) for _ in range(rng.randrange(4)))
            return min((text.split(s)[0] for s in stop), key=len, default=text)

        text = "".join([p async for p in forced_json(Meeting.model_json_schema(), generate, 100, streamed(list(free), []))])
        Meeting.model_validate_json(text)


async def test_a_whole_reply_is_kept_only_when_its_typed_strings_fit_their_formats():
    """A schema the reader cannot steer (a pattern) is validated whole: a date written as
    words fails it there too, and the object is built (its date asked for again)."""
    from tests.gateway.test_tool_forcing import streamed

    schema = {"type": "object", "required": ["code", "day"],
              "properties": {"code": {"type": "string", "pattern": "^[A-Z]+$"}, "day": {"type": "string", "format": "date"}}}

    answers = {'"code": "': "OSL", '"day": "': "2024-01-08"}

    async def generate(suffix: str, max_tokens: int, stop: tuple[str, ...]) -> str:
        return next((a for k, a in answers.items() if suffix.endswith(k)), "\x00")

    kept = [p async for p in forced_json(schema, generate, 100, streamed(['"code": "OSL", "day": "2024-02-01"}'], []))]
    assert kept == ['{"code": "OSL", "day": "2024-02-01"}']
    built = "".join([p async for p in forced_json(schema, generate, 100, streamed(['"code": "OSL", "day": "March 3"}'], []))])
    assert json.loads(built) == {"code": "OSL", "day": "2024-01-08"}
