"""A session id (or agent name) in a header: what an answer sends is what a request reads,
and a raw UTF-8 header is read as UTF-8, not Latin-1."""
import pytest

from agents_trace.conversation import agent_name, explicit_session
from agents_trace.header_ids import decode_header_id, encode_header_id, percent_decoded

IDS = ("café-1", "50% done, now", "a b", "%", "%25", "%41", "100%", "日本/✓ x", "tab\there", "line\nbreak",
       "x" * 300, "é" * 10, "\x00nul", "\u2028sep")


def as_server_reads(raw: bytes) -> str:
    """A header's bytes as Starlette (and every ASGI server) hands them over."""
    return raw.decode("latin-1")


@pytest.mark.parametrize("session", IDS)
def test_an_answers_header_sent_back_names_the_same_id(session):
    encoded = encode_header_id(session)
    assert encoded.isascii() and all(0x20 <= ord(c) < 0x7F for c in encoded)
    assert decode_header_id(as_server_reads(encoded.encode("ascii"))) == session


@pytest.mark.parametrize("session", ["café-1", "50% done, now", "über 100%"])
def test_a_raw_utf8_id_and_the_answers_encoding_of_it_are_one_session(session):
    raw = as_server_reads(session.encode("utf-8"))
    named = explicit_session({"x-session-id": raw}, {})
    assert named == (session, "header")
    again = explicit_session({"x-session-id": encode_header_id(named[0])}, {})
    assert again == named   # sent back: the same session
    assert explicit_session({"x-session-id": raw}, {}) == named   # raw again: still the same


def test_bytes_that_are_not_utf8_are_read_as_latin1_and_a_bad_escape_is_kept():
    assert decode_header_id(as_server_reads(b"caf\xe9")) == "caf\xe9"
    assert decode_header_id("%FF-id") == "%FF-id"   # its bytes are no UTF-8: kept as it came
    assert decode_header_id(encode_header_id("%FF-id")) == "%FF-id"
    assert decode_header_id("a%20b") == "a b" and decode_header_id("caf%C3%A9") == "café"


def test_text_that_is_no_header_bytes_is_taken_as_it_is():
    assert decode_header_id("日本") == "日本"
    assert explicit_session({"x-session-id": "  über/日本 ✓ "}, {}) == ("über/日本 ✓", "header")


def test_the_agent_name_header_is_read_the_same_way():
    assert agent_name({"x-agent-name": as_server_reads("café".encode())}, {}) == "café"
    assert agent_name({"x-agent-name": "plan%20ner"}, {}) == "plan ner"
    assert agent_name({"x-agent-name": " "}, {"metadata": {"agent_name": "meta"}}) == "meta"


def test_percent_decoded_is_the_percent_step_alone():
    """What the trace lookups apply to an id a person pasted: no Latin-1 re-reading."""
    assert percent_decoded("job 100%25") == "job 100%" and percent_decoded("caf%C3%A9") == "café"
    assert percent_decoded("100%") == "100%" and percent_decoded("%FF-id") == "%FF-id"
    assert percent_decoded("caf\xc3\xa9") == "caf\xc3\xa9" != decode_header_id("caf\xc3\xa9")
