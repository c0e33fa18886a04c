"""Writing a file whole or not at all.

Invariant: while `replacing(path)` is open, `path` keeps its old content (or stays
absent); the new content appears under `path` only if the block ends without an
exception (a rename of a partial file beside it, atomic on one file system). On any
exception, Ctrl+C included, the partial file is removed and nothing else changes. The
partial file is this process's own, so two processes writing one file (two gateways
sharing a directory) each put a whole copy in place, the last one staying.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def replacing(path: str | Path, binary: bool = False) -> Iterator[IO]:
    """A stream (text, UTF-8; or bytes) whose content replaces `path` when the block ends normally."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial{os.getpid()}")
    try:
        with open(partial, "wb") if binary else open(partial, "w", encoding="utf-8") as stream:
            yield stream
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
