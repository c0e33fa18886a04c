"""The memory tiers a KV block can live in.

HOT is the accelerator memory the model reads from; HOST is the (larger, slower) host
memory blocks are demoted to instead of being dropped. A block lives in exactly one tier
at a time; each tier numbers its own block slots from 0.
"""
from __future__ import annotations

import enum


class Tier(enum.Enum):
    HOT = "hot"
    HOST = "host"
