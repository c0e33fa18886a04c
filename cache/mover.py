"""How a block's KV bytes move between tiers.

The block manager only does the bookkeeping; whenever a block changes tier it asks a
`BlockMover` to copy the bytes. The worker implements it over its KV tensor arena; the
simulator uses `CountingMover`, which only counts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cache.tiers import Tier


class BlockMover(Protocol):
    """Copies one block's KV from a slot of one tier to a slot of another.

    NOTE: the manager frees the source slot right after this call returns, and may hand
    it out again at its next allocation; an asynchronous implementation must order any
    later write to that slot after this copy.
    """

    def copy_block(self, src_tier: Tier, src_id: int, dst_tier: Tier, dst_id: int) -> None: ...


@dataclass(slots=True)
class CountingMover:
    """A `BlockMover` that moves nothing and counts copies per (source, destination)."""

    bytes_per_block: int = 1
    num_copies: dict[tuple[Tier, Tier], int] = field(default_factory=dict)

    def copy_block(self, src_tier: Tier, src_id: int, dst_tier: Tier, dst_id: int) -> None:
        key = (src_tier, dst_tier)
        self.num_copies[key] = self.num_copies.get(key, 0) + 1

    @property
    def num_copied_bytes(self) -> int:
        return sum(self.num_copies.values()) * self.bytes_per_block
