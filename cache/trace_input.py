"""The text of a trace file for the readers (`trace_format.read_trace`): a path, or stdin.

Invariants: UTF-8, with or without a byte-order mark (an editor's save loads, as the
gateway's config does); "-" is stdin, left open after; a compressed file is refused as what
it is, by its first bytes, before any decoding (never as "not UTF-8 text").
"""
from __future__ import annotations

import errno
import io
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from cache.trace_fields import TraceFormatError

STDIN_PATH = "-"   # read_trace's name for standard input, as `workload generate -o -` names stdout
# The first bytes of a compressed file (no JSON text starts so), and the tool that prints its text.
COMPRESSED_STARTS = ((b"\x1f\x8b", "gzip", "zcat"), (b"\xfd7zXZ\x00", "xz", "xzcat"),
                     (b"\x28\xb5\x2f\xfd", "zstd", "zstdcat"), (b"BZh", "bzip2", "bzcat"))


@contextmanager
def trace_text(path: str | Path) -> Iterator[IO[str]]:
    """The text of the file at `path` (stdin for "-", left open after), decoded as UTF-8
    with or without a byte-order mark. NOTE: a compressed file is recognized by its first
    bytes before any decoding, so it is named as what it is, not as "not UTF-8 text"."""
    if str(path) == STDIN_PATH:
        if sys.stdin is None:   # the process started with stdin closed
            raise OSError(errno.EBADF, "stdin is closed")
        binary = sys.stdin.buffer
    else:
        binary = open(path, "rb")
    if not hasattr(binary, "peek"):   # a stdin replaced by a plain binary stream
        binary = io.BufferedReader(binary)
    stream = io.TextIOWrapper(binary, encoding="utf-8-sig")
    try:
        head = binary.peek(8)
        for start, name, cat in COMPRESSED_STARTS:
            if head.startswith(start):
                raise TraceFormatError(f"{name}-compressed, not JSONL text: decompress it first ({cat} it to "
                                       f"a file, or pipe {cat}'s output in, naming the trace {STDIN_PATH})")
        yield stream
    finally:
        if str(path) == STDIN_PATH:
            stream.detach()   # stdin stays open, as it was given
        else:
            stream.close()
