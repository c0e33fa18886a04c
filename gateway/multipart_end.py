"""Whether a multipart body came whole: its close delimiter (`--` boundary `--`) was seen.

starlette's form parser reads a body cut before its close delimiter without a word, and
drops the part it was in: a cut upload was answered "Missing required parameter: 'file'"
(QA134). The watch sees the body's pieces as they come, keeping only the delimiter's
length less one byte of the last piece, so a delimiter split across two pieces is found.
"""
from __future__ import annotations

from dataclasses import dataclass

from python_multipart.multipart import parse_options_header


@dataclass(slots=True)
class CloseDelimiterWatch:
    """Invariant: `seen` once the close delimiter (after a line break) appeared anywhere in
    the pieces fed."""
    delimiter: bytes
    seen: bool = False
    tail: bytes = b""   # the last len(delimiter) - 1 bytes fed, while not `seen`

    @classmethod
    def of(cls, content_type: str) -> CloseDelimiterWatch | None:
        """The watch for a body of `content_type`; None without a boundary parameter
        (the form parser refuses such a body itself). The delimiter is sought after a line
        break (RFC 2046 5.1.1), so the text `--BOUNDARY--` inside a file's content is not
        taken for it; the body's first bytes count as after one (a form of no parts)."""
        boundary = parse_options_header(content_type)[1].get(b"boundary")
        return cls(b"\r\n--" + boundary + b"--", tail=b"\r\n") if boundary else None

    def feed(self, piece: bytes) -> None:
        if self.seen or not piece:
            return
        window = self.tail + piece
        if self.delimiter in window:
            self.seen, self.tail = True, b""
        else:
            self.tail = window[-(len(self.delimiter) - 1):]

    def problem(self) -> str | None:
        """Why the body was not whole (None when it was)."""
        if self.seen:
            return None
        return f"it ended before its closing boundary ({self.delimiter.strip().decode('latin-1')!r})"
