"""Ids the gateway makes: responses, tool calls, conversations, items, files, batches.

Invariant: every id's random part comes from the operating system's generator
(`agents_trace.ordered_ids.random_bits`, `os.urandom`), never from `random`: the Mersenne
Twister that `random` shares by the whole process can be rebuilt from a few hundred of
its outputs, and one tenant's own ids would then tell it every id made next and how many
other tenants' operations ran in between. Nothing here grants access either way: every
lookup by id is also by tenant.
"""
from __future__ import annotations

import os

from agents_trace.ordered_ids import random_bits

ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def new_id(prefix: str) -> str:
    """A unique response id: `prefix`, a dash, 24 hex digits."""
    return f"{prefix}-{random_bits(96):024x}"


def new_tool_call_id() -> str:
    """`call_` and 24 characters of ID_ALPHABET (each from one random byte, 62 of 256
    values folded onto the alphabet: a slight lean to its first 8 characters)."""
    return "call_" + "".join(ID_ALPHABET[byte % len(ID_ALPHABET)] for byte in os.urandom(24))


def random_hex(num_chars: int) -> str:
    return f"{random_bits(num_chars * 4):0{num_chars}x}"
