"""An error as a one-line reason."""
from __future__ import annotations


def one_line_error(exc: BaseException) -> str:
    """`<Error>: <message>` on one line (a message's line breaks and runs of spaces become
    single spaces): a reason a one-line report can carry."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
