"""The answer of a prefix lookup (`Match`), and what a request holds of it once acquired
(`AcquiredRun`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from cache.block_meta import LineageId


@dataclass(slots=True)
class Match:
    """The cached leading run of a request's blocks.

    `hot_block_ids` are the first blocks of the request found in the HOT tier, in order;
    `host_block_ids` continue that run with blocks found only in the HOST tier. The run
    stops at the first block that is missing (or that sits in HOT after a HOST block).
    `block_uids` holds the lineage id of every block of the run (hot ones, then host
    ones), so `acquire` can tell that a slot was reused since the lookup and stop there;
    an empty list means "do not check".
    """

    hot_block_ids: list[int]
    host_block_ids: list[int]
    num_hot_tokens: int
    num_host_tokens: int
    block_uids: list[LineageId] = field(default_factory=list)

    @property
    def num_blocks(self) -> int:
        return len(self.hot_block_ids) + len(self.host_block_ids)

    @property
    def num_tokens(self) -> int:
        return self.num_hot_tokens + self.num_host_tokens


@dataclass(slots=True)
class AcquiredRun:
    """The usable leading run of a `Match`, as `BlockManager.acquire_run` referenced it.

    `hot_ids` come first (the HOT part, then the HOST blocks promoted into HOT); `host_ids`
    continue the run with the HOST blocks HOT had no room to promote, to be read straight
    from the host tier into the request's own cache. The caller holds one reference on
    every id: the HOT ones until the request ends (`release`), the HOST ones until it has
    read them (`release_host`), so none of their slots is reused meanwhile.
    """

    hot_ids: list[int]
    host_ids: list[int] = field(default_factory=list)

    @property
    def num_blocks(self) -> int:
        return len(self.hot_ids) + len(self.host_ids)
