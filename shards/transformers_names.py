"""transformers' names, and the other large libraries, imported one thread at a time.

transformers resolves its names lazily (`from transformers import X` imports X's module
on first use), and two threads doing that at once fail one of them with "cannot import
name 'X' from 'transformers'": a gateway starting an embedding model beside the tiny
model's tokenizer did, every time. SciPy (imported by hmmlearn through scikit-learn when
the forecasters start) reads `sys.modules["torch"]` directly while it imports, and found
a torch another thread was still importing for an embedding model: "partially
initialized module 'torch' has no attribute 'Tensor'" failed the start (QA208 F1).
Invariant: every import of a transformers name made off the main thread in the gateway's
process goes through `transformers_names`, and the forecasters' import of hmmlearn takes
`LIBRARY_IMPORTS` too; what they import is then used without the lock.
"""
from __future__ import annotations

import threading

LIBRARY_IMPORTS = threading.Lock()   # NOTE: process-wide by nature, as the import system is


def transformers_names(*names: str) -> tuple:
    """transformers' objects named `names`, in order (importing transformers, and the
    modules that define them, under the lock)."""
    with LIBRARY_IMPORTS:
        import transformers

        return tuple(getattr(transformers, name) for name in names)
