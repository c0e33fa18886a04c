"""A line on stderr in one write, so another thread's output cannot land inside it.

`print(text, file=sys.stderr)` writes the text and the newline separately: a line printed
from a worker thread (the forecasters' start) while the loop printed another came out
glued to it (QA145). Invariant: `text` is written with its newline in one `write`, then
flushed (stdout may be JSON, so these lines go to stderr).
"""
from __future__ import annotations

import sys


def stderr_line(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
