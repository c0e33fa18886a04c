"""A client-chosen id (a session id, an agent's name) carried in an HTTP header, both ways.

An answer names its session in `x-session-id` with `encode_header_id`: printable ASCII
other than `%` as it is, everything else percent-encoded from UTF-8, so any id fits a
header. A request's `x-session-id` and `x-agent-name` are read with `decode_header_id`:
the header's raw bytes as UTF-8 (as Latin-1 only where they are not valid UTF-8), then
percent-decoded where the decoded bytes are UTF-8 (else the text is kept as it came).
The trace lookups take an answer's header pasted as an id with `percent_decoded` too
(store_queries: the id as given first).

Invariants:
- `decode_header_id(encode_header_id(x)) == x` for every id `x` (no lone surrogates), so
  an answer's header sent back names the same session;
- `decode_header_id` is a function of the header's bytes alone: the same header always
  names the same session, whether a client sends an id raw (UTF-8 or ASCII) or as the
  gateway encoded it (`café`, `caf%C3%A9` and `caf\\xc3\\xa9` as bytes are one id);
- it takes the header as servers hand it over, text decoded from Latin-1 (Starlette's
  `Headers`: one character per byte, so the raw bytes come back exactly); text that is
  not Latin-1 (a caller passing ids straight to the tracer) is taken as it is.
"""
from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes

HEADER_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")   # left as they are in a header


def encode_header_id(value: str) -> str:
    """`value` as a header value: printable ASCII but `%` kept, the rest `%XX` of its UTF-8."""
    return quote(value, safe=HEADER_SAFE)


def header_text(value: str) -> str:
    """A header's value as text: its bytes (one per character of the Latin-1 text a server
    hands over) read as UTF-8, or as Latin-1 where they are not valid UTF-8."""
    try:
        raw = value.encode("latin-1")
    except UnicodeEncodeError:   # already text, not a header's bytes
        return value
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return value


def percent_decoded(text: str) -> str:
    """`text` percent-decoded (`%25` is `%`, `%C3%A9` is `é`; a `%` not followed by two hex
    digits stays); a text whose decoded bytes are not UTF-8 (`%FF`) is kept as it is."""
    if "%" not in text:
        return text
    try:
        return unquote_to_bytes(text).decode("utf-8")
    except UnicodeDecodeError:
        return text


def decode_header_id(value: str) -> str:
    """The id a header names: `header_text`, `percent_decoded`."""
    return percent_decoded(header_text(value))
