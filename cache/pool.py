"""The fixed set of block slots of one tier."""
from __future__ import annotations

from collections.abc import Iterator

from cache.block_meta import BlockMeta
from cache.tiers import Tier


class TierPool:
    """Slots `0 .. num_blocks-1` of one tier: each is free or holds exactly one block.

    Invariant (outside a `take` ... `put` pair, which the manager never leaves open
    across a call): every slot is free or held, `num_free_blocks + num_used_blocks ==
    num_blocks`, and a held block's `tier`/`id` equal this pool's tier and its slot.
    Free slots are handed out lowest id first from a fresh pool, then last-freed first
    (a stack: O(1), no allocation).
    """

    __slots__ = ("tier", "num_blocks", "_free", "_blocks")

    def __init__(self, tier: Tier, num_blocks: int) -> None:
        if num_blocks < 0:
            raise ValueError(f"num_blocks must be >= 0, got {num_blocks}")
        self.tier = tier
        self.num_blocks = num_blocks
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))
        self._blocks: list[BlockMeta | None] = [None] * num_blocks

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self._free)

    def get(self, block_id: int) -> BlockMeta | None:
        """The block in slot `block_id`; None if the slot is free or out of range."""
        if 0 <= block_id < self.num_blocks:
            return self._blocks[block_id]
        return None

    def take(self) -> int | None:
        """Reserve a free slot for `put`; None if the tier is full."""
        if not self._free:
            return None
        return self._free.pop()

    def give_back(self, block_id: int) -> None:
        """Free slot `block_id`, reserved by `take` and filled by no `put`."""
        if not 0 <= block_id < self.num_blocks or self._blocks[block_id] is not None or block_id in self._free:
            raise ValueError(f"{self.tier.value} slot {block_id} is not a reserved one")
        self._free.append(block_id)

    def put(self, block: BlockMeta) -> None:
        """Store `block` in the slot it names (one just returned by `take`)."""
        if block.tier is not self.tier or self._blocks[block.id] is not None:
            raise ValueError(f"{self.tier.value} slot {block.id} is not reserved for this block")
        self._blocks[block.id] = block

    def remove(self, block: BlockMeta) -> None:
        """Free the slot `block` holds."""
        if block.tier is not self.tier or self.get(block.id) is not block:
            raise ValueError(f"block {block.id} is not held by the {self.tier.value} pool")
        self._blocks[block.id] = None
        self._free.append(block.id)

    def blocks(self) -> Iterator[BlockMeta]:
        """The held blocks, by slot id (a snapshot: safe to change the pool meanwhile)."""
        return iter([block for block in self._blocks if block is not None])
