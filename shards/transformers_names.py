"""transformers' names, resolved one thread at a time.

transformers resolves its names lazily (`from transformers import X` imports X's module
on first use), and two threads doing that at once fail one of them with "cannot import
name 'X' from 'transformers'": a gateway starting an embedding model beside the tiny
model's tokenizer did, every time. Invariant: every import of a transformers name made
off the main thread in the gateway's process goes through `transformers_names`, which
takes `TRANSFORMERS_IMPORT`; what it returns is then used without the lock.
"""
from __future__ import annotations

import threading

TRANSFORMERS_IMPORT = threading.Lock()   # NOTE: process-wide by nature, as the import system is


def transformers_names(*names: str) -> tuple:
    """transformers' objects named `names`, in order (importing transformers, and the
    modules that define them, under the lock)."""
    with TRANSFORMERS_IMPORT:
        import transformers

        return tuple(getattr(transformers, name) for name in names)
