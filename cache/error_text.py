"""An error as a one-line reason; the known name a misspelt one most likely meant."""
from __future__ import annotations

import difflib
from collections.abc import Collection


def one_line_error(exc: BaseException) -> str:
    """`<Error>: <message>` on one line (a message's line breaks and runs of spaces become
    single spaces): a reason a one-line report can carry."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def did_you_mean(name: object, known: Collection[str]) -> str:
    """`; did you mean 'X'?` with the known name nearest `name` when it looks like a typo
    (`num_worker` -> 'num_workers'), else nothing: one wording for every unknown setting."""
    near = difflib.get_close_matches(str(name), sorted(known), n=1)
    return f"; did you mean {near[0]!r}?" if near else ""
