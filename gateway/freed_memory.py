"""Memory the gateway freed, given back to the system.

glibc's allocator keeps the heap pages it was given (small blocks are freed into its
arenas, not to the system), so after a large transient load (a batch of 50,000 requests
ending: its results read, encoded and written) the process's resident size stays near its
peak (QA153: 1,546 of 1,643 MiB still held once every batch was cancelled, from 502 before).
`malloc_trim(0)` returns the free pages of every arena.

Invariant: only ever calls glibc's `malloc_trim`; anywhere else (another C library, no
malloc_trim) it does nothing. It walks the whole heap (milliseconds on a large one, holding the
arenas' locks but not the GIL): call it off the event loop.
"""
from __future__ import annotations

import ctypes
import os


def release_freed_memory() -> bool:
    """Give the allocator's free heap pages back to the system; False where the C library
    is not glibc (nothing done)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (ValueError, OSError, AttributeError):   # no such confstr name, or no libc to load
        return False
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True
