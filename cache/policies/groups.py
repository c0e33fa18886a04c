"""Evictable blocks grouped by the sessions that value them, ranked in lazy heaps.

A block's value comes from the forecasts of the sessions that use it, so blocks used by
the same sessions share one value: they form a `BlockGroup` (per tier and tenant). A
session's private chain is one group; a prefix several sessions share (a tenant's system
prompt and tool schemas) is a group of its own, valued by all of them. Blocks no request
named a session for (batch lines, untraced requests) are valued by their last use alone,
so they are grouped by when they were filed, one group per `SESSIONLESS_SPAN_S`: one group
for all of a tenant's would look as fresh as its newest block, and outrank every
session's context however long ago the rest were used. Values change with time, so the
policy re-ranks a group when it asks for it (`due`), not every block.

Invariants:
- `_group_of` maps exactly the evictable (cached, unreferenced) blocks the policy was told
  about to the group holding them; a group in `_groups` is never empty.
- A heap entry `(value, version, group)` is live iff `version == group.version`
  and the group is still registered: re-ranking gives the group a new (globally unique)
  version instead of searching the heap for the old entry.
- Inside a group the least recently used block leaves first (`BlockMeta.last_access_s`,
  which a move between tiers keeps), the deepest chain position first among equals: a
  prefix is used whenever its tail is, so it outlives its tail; and blocks filed within
  one `SESSIONLESS_SPAN_S` leave in LRU order. An `order` entry is live iff its block is
  in the group with the same `last_access_s` (re-filing pushes a new one).
- Every ranking is pushed to its (tier, tenant) heap and to its tier's heap, so the
  cheapest group of one tenant and of the whole tier are each found without a pass over
  the tenants (a worker may hold blocks of thousands).
Every operation is O(log n) amortised (`lowest_accepted`: plus the groups it skips, at
most `max_skips`); nothing here computes a value.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from cache.block_meta import BlockMeta
from cache.tiers import Tier

GroupKey = tuple[bool, str, object]
SESSIONLESS_SPAN_S = 1.0   # blocks without sessions filed within one span share a group


@dataclass(slots=True, eq=False)
class BlockGroup:
    """Evictable blocks of one tier and tenant used by the same sessions (`sessions`,
    oldest first; empty when no request named a session).

    `last_added_s`: when a block was last filed here (released, or moved in);
    `last_used_s`: the newest last use (`BlockMeta.last_access_s`) of the blocks filed,
    which a move between tiers leaves as it was; `value` was computed at `ranked_s`.
    """

    key: GroupKey
    tier: Tier
    tenant: str
    sessions: tuple[str, ...]
    blocks: dict[BlockMeta, None] = field(default_factory=dict)
    order: list[tuple[float, int, int, BlockMeta]] = field(default_factory=list)
    version: int = 0
    last_added_s: float = 0.0
    last_used_s: float = 0.0
    ranked_s: float = float("-inf")
    is_pinned: bool = False
    value: float = 0.0

    @property
    def last_use_s(self) -> float:
        """When the blocks were last used, for values without a trusted forecast: a HOT
        group's latest filing (a release), a HOST group's blocks' own last use (a demotion
        is no use: from its time, HOST would look fresher than HOT's LRU block)."""
        return self.last_used_s if self.tier is Tier.HOST else self.last_added_s


def group_key(block: BlockMeta, now_s: float) -> tuple[GroupKey, tuple[str, ...]]:
    """The group a block filed at `now_s` belongs to, and its sessions.

    NOTE: keys hold `is_host` (a bool), not the `Tier`: hashing an Enum member runs
    Python code, and keys are hashed on every hook.
    """
    sessions = block.sessions
    is_host = block.tier is Tier.HOST
    if len(sessions) == 1:
        name = next(iter(sessions))
        return (is_host, block.tenant, name), (name,)
    if not sessions:   # an int third: never a session's name (a str) nor a set of them
        return (is_host, block.tenant, int(now_s // SESSIONLESS_SPAN_S)), ()
    names = tuple(sessions)
    return (is_host, block.tenant, frozenset(names)), names


class GroupIndex:
    """The evictable blocks of every tier, by group, with per-(tier, tenant) value heaps."""

    __slots__ = ("_groups", "_group_of", "_heaps", "_tier_heaps", "_due", "_seq")

    def __init__(self) -> None:
        self._groups: dict[GroupKey, BlockGroup] = {}
        self._group_of: dict[BlockMeta, BlockGroup] = {}
        self._heaps: dict[tuple[bool, str], list[tuple[float, int, BlockGroup]]] = {}
        self._tier_heaps: dict[bool, list[tuple[float, int, BlockGroup]]] = {False: [], True: []}
        self._due: list[tuple[float, int, BlockGroup]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._group_of)

    def add(self, block: BlockMeta, now_s: float) -> tuple[BlockGroup, bool]:
        """File an evictable block; returns its group and whether the group is new."""
        key, sessions = group_key(block, now_s)
        group = self._groups.get(key)
        is_new = group is None
        if group is None:
            group = BlockGroup(key, block.tier, block.tenant, sessions)
            self._groups[key] = group
        group.blocks[block] = None
        group.last_added_s = now_s
        if block.last_access_s > group.last_used_s or is_new:
            group.last_used_s = block.last_access_s
        self._seq += 1
        order = group.order
        heapq.heappush(order, (block.last_access_s, -block.position, self._seq, block))
        if len(order) > 2 * len(group.blocks) + 16:
            order[:] = [entry for entry in order if _is_live(entry, group)]
            heapq.heapify(order)
        self._group_of[block] = group
        return group, is_new

    def remove(self, block: BlockMeta) -> BlockGroup | None:
        """Unfile a block (no longer evictable); returns the group it left, if any."""
        group = self._group_of.pop(block, None)
        if group is None:
            return None
        del group.blocks[block]
        if not group.blocks:
            del self._groups[group.key]
            group.order.clear()
        return group

    def group(self, tier: Tier, tenant: str, session: str) -> BlockGroup | None:
        """The group of blocks only `session` uses, in `tier`."""
        return self._groups.get((tier is Tier.HOST, tenant, session))

    def groups(self) -> Iterator[BlockGroup]:
        return iter(list(self._groups.values()))

    def group_of(self, block: BlockMeta) -> BlockGroup | None:
        return self._group_of.get(block)

    def rank(self, group: BlockGroup, value: float, due_s: float, *, is_pinned: bool = False,
             ranked_s: float = float("-inf")) -> None:
        """Give a group a new value (computed at `ranked_s`), and the time it should be
        recomputed."""
        group.ranked_s = ranked_s
        self._seq += 1
        group.version = self._seq
        group.is_pinned = is_pinned
        group.value = value
        heap_key = (group.key[0], group.tenant)
        heap = self._heaps.get(heap_key)
        if heap is None:
            heap = self._heaps[heap_key] = []
        entry = (value, group.version, group)
        for heap in (heap, self._tier_heaps[group.key[0]]):
            heapq.heappush(heap, entry)
            if len(heap) > 4 * len(self._groups) + 64:
                heap[:] = [entry for entry in heap if entry[1] == entry[2].version and self._live(entry[2])]
                heapq.heapify(heap)
        heapq.heappush(self._due, (due_s, group.version, group))

    def _live(self, group: BlockGroup) -> bool:
        return self._groups.get(group.key) is group

    def top(self, tier: Tier, tenant: str) -> tuple[float, BlockGroup] | None:
        """The lowest-valued group of `tenant` in `tier`: (value, group)."""
        heap = self._heaps.get((tier is Tier.HOST, tenant))
        while heap:
            value, version, group = heap[0]
            if version == group.version and self._live(group):
                return value, group
            heapq.heappop(heap)
        return None

    def lowest(self, tier: Tier) -> tuple[float, BlockGroup] | None:
        """The lowest-valued group in `tier`: (value, group)."""
        return self.lowest_accepted(tier, lambda tenant: True, 0)[1]

    def lowest_accepted(self, tier: Tier, accept: Callable[[str], bool], max_skips: int
                        ) -> tuple[bool, tuple[float, BlockGroup] | None]:
        """The lowest-valued group in `tier` of a tenant `accept` takes, looked for past
        at most `max_skips` cheaper groups of others: (True, (value, group) or None), or
        (False, None) if it gave up (ask `tenants` one by one then). Skipped groups stay
        ranked."""
        heap = self._tier_heaps[tier is Tier.HOST]
        skipped = []
        try:
            while heap:
                entry = heap[0]
                value, version, group = entry
                if version != group.version or not self._live(group):
                    heapq.heappop(heap)
                elif accept(group.tenant):
                    return True, (value, group)
                elif len(skipped) >= max_skips:
                    return False, None
                else:
                    skipped.append(heapq.heappop(heap))
            return True, None
        finally:
            for entry in skipped:
                heapq.heappush(heap, entry)

    def tenants(self, tier: Tier) -> list[str]:
        """Tenants that may have evictable blocks in `tier`."""
        is_host = tier is Tier.HOST
        return [tenant for (heap_is_host, tenant), heap in self._heaps.items() if heap_is_host is is_host and heap]

    def pop_due(self, now_s: float) -> list[BlockGroup]:
        """Live groups whose rank is due for recomputation at `now_s`."""
        due = self._due
        found: list[BlockGroup] = []
        while due and due[0][0] <= now_s:
            _, version, group = heapq.heappop(due)
            if version == group.version and self._live(group):
                found.append(group)
        return found

    @staticmethod
    def victim(group: BlockGroup) -> BlockMeta:
        """The least recently used block of a (non-empty, live) group, the deepest
        first among equals."""
        order = group.order
        while order:
            entry = order[0]
            if _is_live(entry, group):
                return entry[3]
            heapq.heappop(order)
        raise RuntimeError("a live group with no blocks")


def _is_live(entry: tuple[float, int, int, BlockMeta], group: BlockGroup) -> bool:
    """Whether an `order` entry still stands for its block (filed there, not since re-filed)."""
    block = entry[3]
    return block in group.blocks and entry[0] == block.last_access_s
