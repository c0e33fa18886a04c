"""Ids the gateway makes: responses, tool calls, conversations, items, files, batches.

NOTE: ids need uniqueness, not secrecy: `random` (seeded from the OS once) is used
because an `os.urandom` call costs ~40 µs on small VMs. Nothing here grants access: every
lookup by id is also by tenant.
"""
from __future__ import annotations

import random

ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def new_id(prefix: str) -> str:
    """A unique response id: `prefix`, a dash, 24 hex digits."""
    return f"{prefix}-{random.getrandbits(96):024x}"


def new_tool_call_id() -> str:
    return "call_" + "".join(random.choices(ID_ALPHABET, k=24))


def random_hex(num_chars: int) -> str:
    return f"{random.getrandbits(num_chars * 4):0{num_chars}x}"
