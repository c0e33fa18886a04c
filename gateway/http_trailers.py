"""The trailer section of a chunked request (the fields after its last, size-0 chunk), as
the gateway's HTTP/1.1 connections read it: dropped, and bounded as a head is.

uvicorn appended every trailer field to the request's header list, which is the scope's
`headers`: a request sent in one write with `Authorization` only as a trailer was
authenticated (and an `X-Session-Id` trailer named its session), past any front proxy that
checks the header section; and no limit applied to trailers (one anonymous request held
150 MB of them, kept until a full garbage collection: QA228).

Invariants: a field parsed after a request's head (a trailer) never reaches the app: it is
not added to `scope["headers"]` (RFC 9110 §6.5.1 lets a recipient discard trailers, and
forbids merging one into the header section unless its field's definition allows it). A
trailer section is at most `max_head_bytes`, measured two ways, each at most the section's
size (so a section within the limit is never refused): the fields completed since the last
chunk header (name, value and 3 for the colon and CRLF), and the reads that held nothing
but trailer bytes (the parser keeps a field's bytes until the field ends, so a single
endless field is measured as it comes: a read after a chunk header in which no chunk data,
chunk end or other chunk header came; what the parser holds of a section is so at most the
limit and two reads). Past the limit, the request fails as one whose body the parser
refused (the host's `_fail_request`: a 431 `request_header_fields_too_large` in OpenAI's
shape as its one answer, unless its app's answer began; its app sees its client gone; the
connection closed). Nothing else changes for a chunked body: a read ending just after a
chunk's size line is followed by that chunk's data (`on_body`), never counted.

The host class provides `_in_head` (True while a request's head is read), `_refusal` (not
None once the connection is refusing), `max_head_bytes` and `_fail_request(status,
message, code)`; this mixin comes before uvicorn's protocol in its bases.
"""
from __future__ import annotations


class TrailerGuard:
    """Drops a chunked request's trailer fields and bounds their size (see the module)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._after_chunk_header = False   # a chunk's size line came, none of its data (nor its end) yet
        self._chunk_header_in_read = False   # a chunk header came during the read being parsed
        self._trailer_field_bytes = 0   # trailer fields completed since the last chunk header
        self._trailer_read_bytes = 0   # reads since the last chunk header that held only trailer bytes

    def data_received(self, data: bytes) -> None:
        self._chunk_header_in_read = False
        super().data_received(data)
        if self._after_chunk_header and not self._chunk_header_in_read and not self._in_head:
            self._trailer_read_bytes += len(data)   # all of it follows a size-0 chunk's line: trailer bytes
            self._check_trailer_size(self._trailer_read_bytes)

    def on_chunk_header(self) -> None:
        self._after_chunk_header = self._chunk_header_in_read = True
        self._trailer_field_bytes = self._trailer_read_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._after_chunk_header = False
        super().on_body(body)

    def on_chunk_complete(self) -> None:
        self._after_chunk_header = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:
            super().on_header(name, value)
            return
        self._trailer_field_bytes += len(name) + len(value) + 3   # a trailer: measured, then dropped
        self._check_trailer_size(self._trailer_field_bytes)

    def _check_trailer_size(self, size: int) -> None:
        if size > self.max_head_bytes and self._refusal is None:
            self._after_chunk_header = False
            self._fail_request(431, f"The request's trailer section (the fields after its last chunk) exceeds "
                               f"{self.max_head_bytes} bytes.", "request_header_fields_too_large")
