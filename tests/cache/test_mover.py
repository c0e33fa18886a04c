"""CountingMover: the simulator's BlockMover."""
from __future__ import annotations

from cache.mover import CountingMover
from cache.tiers import Tier


def test_counting_mover_counts_per_direction_and_bytes() -> None:
    mover = CountingMover(bytes_per_block=100)
    mover.copy_block(Tier.HOT, 0, Tier.HOST, 3)
    mover.copy_block(Tier.HOT, 1, Tier.HOST, 4)
    mover.copy_block(Tier.HOST, 3, Tier.HOT, 0)
    assert mover.num_copies == {(Tier.HOT, Tier.HOST): 2, (Tier.HOST, Tier.HOT): 1}
    assert mover.num_copied_bytes == 300
