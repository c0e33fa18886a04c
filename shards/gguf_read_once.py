"""Within one GGUF conversion, read the file once and map its tensor names once.

transformers converts a GGUF checkpoint in three passes — the config, the weights, the
tokenizer — and each builds a `gguf.GGUFReader`, which parses every field of the file
(SmolLM2's 49,152-token vocabulary: about 4.5 s a parse here); the weights pass also
builds gguf's tensor-name map once per module of the model (397 times, 10 s in all).
Both are pure functions of their arguments, so `gguf_read_once()` memoizes them while
it is active: measured on SmolLM2, its conversion went from about 34 s to 11 s (imports
aside) with the very same weights (largest difference 0.0) and tokenizer.

NOTE: it swaps `gguf.GGUFReader` and `gguf.get_tensor_name_map` for the duration (transformers
imports both from `gguf` inside its functions, at each call) and puts them back after;
nothing may read another GGUF file in this process meanwhile expecting a fresh parse of
a file changed on disk. The conversion runs in a child process of its own.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator


@contextlib.contextmanager
def gguf_read_once() -> Iterator[None]:
    import gguf

    original_reader, original_name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict = {}

    def reader(path, *args, **kwargs):
        key = (str(path), args, tuple(sorted(kwargs.items())))
        if key not in readers:
            readers[key] = original_reader(path, *args, **kwargs)
        return readers[key]

    gguf.GGUFReader = reader
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(original_name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = original_reader, original_name_map
