"""The block manager: which KV block slots hold which prefixes, in which tier.

One mechanism for every policy: the manager (with its `Residency`) keeps slots,
references, the hash index, tier moves, events and counters; an `EvictionPolicy` only picks victims and may act
ahead of time through `CacheActions` (which this class implements). It is pure
bookkeeping: the KV bytes stay with the caller, moved through a `BlockMover`.

A request's life: `match` (read-only lookup) -> `acquire` (take references, promote the
host part) -> prefill the rest -> `commit` (register the new full blocks) -> `release`.
A caller that can read the host tier itself (the worker's runner) uses `acquire_run`
instead: the host part that HOT has no room to promote stays in HOST, referenced, the
caller reads it into the request's own cache and drops those references
(`release_host`); its commit then starts past them.

Invariants:
- Every slot of a tier is free or holds one block: free + used == total, always.
- A block with references is never evicted, demoted or dropped (in either tier: a HOST
  block a request reads through keeps its slot until `release_host`).
- A block is matchable only through its exact lineage: the first block must carry the
  requesting tenant's salt scope, and each later one must name the matched block before
  it as its parent (`BlockMeta.parent_uid`), with equal token ids when the caller gives
  them. A forced hash collision therefore costs a miss, never another prefix's KV.
- The event queue, replayed in order, gives exactly the matchable (hash, tier) pairs.

Slots, the hash index, tier moves and events live in `Residency`; this class adds the
request protocol: lineage checks and per-tenant hit counters. The moves policies and
operators ask for (demote, promote, drop, clear) are its base class `BlockMoves`
(cache/block_moves.py); sizes, read access and the counters' snapshot, `BlockCounts`
(cache/block_counts.py); what it hands to its policy and the event queue, `PolicyCalls`
(cache/block_policy_calls.py); new blocks, references and each block's sessions,
`BlockReferences` (cache/block_references.py).

NOTE: not thread-safe; one owner (a worker loop, the simulator) drives it.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from cache.hashing import BlockHash, chain_hashes, split_blocks, tenant_salt
from cache.lineage import continues, token_blocks_offset, verified_run
from cache.lru import LRUPolicy
from cache.block_counts import BlockCounts
from cache.block_moves import BlockMoves
from cache.block_policy_calls import PolicyCalls
from cache.block_references import BlockReferences
from cache.match import AcquiredRun, Match
from cache.mover import BlockMover
from cache.policy import EvictionPolicy
from cache.residency import Residency
from cache.stats import TenantStats
from cache.tiers import Tier

__all__ = ["AcquiredRun", "BlockManager", "BlockMover", "Match"]


class BlockManager(BlockCounts, BlockMoves, PolicyCalls, BlockReferences):
    """Prefix-cached KV block slots over a HOT and an optional HOST tier.

    `prefix_groups` gives a tenant's configured prefix group (tenants of one group share
    cached prefixes), as a mapping or as a function returning the group or None; it must
    agree with the salt the caller hashes with (use `salt_for`/`hash_prompt`), and is
    read once per tenant. `max_sessions_per_block` bounds `BlockMeta.sessions`;
    `max_pending_events` bounds the event queue (oldest dropped and counted when nobody
    drains it; None for unbounded). `evict_background_first`: a tier needing room loses the
    blocks only flex requests used before the policy is asked (`cache.background_blocks`).
    """

    def __init__(
        self,
        *,
        num_hot_blocks: int,
        num_host_blocks: int = 0,
        block_size: int = 16,
        bytes_per_block: int = 1,
        policy: EvictionPolicy | None = None,
        mover: BlockMover | None = None,
        clock: Callable[[], float] = time.monotonic,
        prefix_groups: Mapping[str, str] | Callable[[str], str | None] | None = None,
        max_sessions_per_block: int = 32,
        max_pending_events: int | None = 1_000_000,
        evict_background_first: bool = True,
    ) -> None:
        if num_hot_blocks <= 0 or num_host_blocks < 0:
            raise ValueError(
                f"need num_hot_blocks > 0 and num_host_blocks >= 0, got {num_hot_blocks}, {num_host_blocks}"
            )
        if block_size <= 0 or bytes_per_block <= 0 or max_sessions_per_block <= 0:
            raise ValueError("block_size, bytes_per_block and max_sessions_per_block must be positive")
        self._policy: EvictionPolicy = policy if policy is not None else LRUPolicy()
        self._residency = Residency(
            num_hot_blocks=num_hot_blocks,
            num_host_blocks=num_host_blocks,
            policy=self._policy,
            mover=mover,
            max_pending_events=max_pending_events,
            evict_background_first=evict_background_first,
        )
        self._hot = self._residency.hot
        self._host = self._residency.host
        self._block_size = block_size
        self._bytes_per_block = bytes_per_block
        self._clock = clock
        if callable(prefix_groups):
            self._group_of: Callable[[str], str | None] = prefix_groups
        else:
            self._group_of = dict(prefix_groups or {}).get
        self._salts: dict[str, bytes] = {}
        self._max_sessions = max_sessions_per_block
        self._next_uid = 0
        self._tenants: dict[str, TenantStats] = {}
        self._num_collisions = 0
        self._num_referenced = 0  # blocks with ref_count > 0: held by requests still running

    # ---- the request path -----------------------------------------------------------

    def salt_for(self, tenant: str) -> bytes:
        """The salt this manager scopes `tenant`'s first blocks with (its prefix group's)."""
        salt = self._salts.get(tenant)
        if salt is None:
            salt = tenant_salt(tenant, self._group_of(tenant))
            self._salts[tenant] = salt
        return salt

    def hash_prompt(self, tenant: str, token_ids: Sequence[int]) -> tuple[list[BlockHash], list[tuple[int, ...]]]:
        """The chained hashes and token tuples of the full blocks of a prompt."""
        return (chain_hashes(token_ids, self._block_size, self.salt_for(tenant)),
                split_blocks(token_ids, self._block_size))


    def match(
        self, tenant: str, hashes: Sequence[BlockHash], token_blocks: Sequence[Sequence[int]] | None = None
    ) -> Match:
        """The cached leading run of `hashes` (read-only: no references, no stats).

        A block continues the run only if it is registered under its hash, descends from
        the previous matched block (the first one: carries `tenant`'s salt scope) and,
        when `token_blocks` is given, holds equal token ids. The run stops at the first
        block that fails, and at a HOT block after a HOST one.
        """
        if token_blocks is not None and len(token_blocks) != len(hashes):
            raise ValueError("token_blocks must have one entry per hash")
        run = verified_run(self._residency.find, self.salt_for(tenant), hashes, token_blocks, len(hashes))
        hot_ids: list[int] = []
        host_ids: list[int] = []
        for block in run:
            if block.tier is Tier.HOT:
                if host_ids:
                    del run[len(hot_ids) + len(host_ids):]
                    break
                hot_ids.append(block.id)
            else:
                host_ids.append(block.id)
        size = self._block_size
        return Match(hot_ids, host_ids, len(hot_ids) * size, len(host_ids) * size, [block.uid for block in run])

    def acquire(self, tenant: str, session: str | None, match: Match, num_prompt_tokens: int, *,
                background: bool = False) -> list[int]:
        """Take a reference on every block of `match`, promoting its HOST part to HOT
        (`background`: for a flex request, `cache.background_blocks`).

        Returns the HOT ids of the usable run, in order: shorter than the match when a
        block changed since `match` (its slot was reused) or when no HOT room could be
        made for a promotion. The caller owns one reference on each returned id. Records
        the tenant's query tokens (`num_prompt_tokens`) and hit tokens per tier.
        """
        return self._acquire(tenant, session, match, num_prompt_tokens, background, read_host=False).hot_ids

    def acquire_run(self, tenant: str, session: str | None, match: Match, num_prompt_tokens: int, *,
                    background: bool = False) -> AcquiredRun:
        """`acquire`, except that the HOST blocks HOT has no room to promote are not let
        go: they stay in HOST, referenced, as `host_ids` after the HOT run, for the caller
        to read straight into the request's own cache and then drop (`release_host`).
        They count as host hits; the run is shorter than the match only where a block
        changed since `match`.
        """
        return self._acquire(tenant, session, match, num_prompt_tokens, background, read_host=True)

    def _acquire(self, tenant: str, session: str | None, match: Match, num_prompt_tokens: int, background: bool,
                 read_host: bool) -> AcquiredRun:
        if num_prompt_tokens < 0:
            raise ValueError(f"num_prompt_tokens must be >= 0, got {num_prompt_tokens}")
        now = self._clock()
        uids = match.block_uids if len(match.block_uids) == match.num_blocks else None
        run: list[int] = []
        for i, block_id in enumerate(match.hot_block_ids):
            block = self._hot.get(block_id)
            if block is None or not block.is_cached or (uids is not None and block.uid != uids[i]):
                break
            self._ref(block, session, now, background)
            run.append(block_id)
        num_hot = len(run)
        read: list[int] = []
        if num_hot == len(match.hot_block_ids) and match.host_block_ids:
            promoted, read = self._promote_run(tenant, session, match, uids, now, background, read_host)
            run.extend(promoted)
        stats = self._tenant(tenant)
        stats.num_requests += 1
        stats.num_query_tokens += num_prompt_tokens
        hot_tokens = min(num_hot * self._block_size, num_prompt_tokens)
        host_tokens = min((len(run) + len(read) - num_hot) * self._block_size, num_prompt_tokens - hot_tokens)
        stats.num_hot_hit_tokens += hot_tokens
        stats.num_host_hit_tokens += host_tokens
        stats.num_miss_tokens += num_prompt_tokens - hot_tokens - host_tokens
        return AcquiredRun(run, read)

    def commit(
        self,
        tenant: str,
        session: str | None,
        hashes: Sequence[BlockHash],
        token_blocks: Sequence[Sequence[int]],
        start: int,
        *,
        background: bool = False,
    ) -> list[tuple[int, bool]]:
        """Put the blocks `hashes[start:]` in HOT, in order, each with one reference
        (`background`: for a flex request; its new blocks are evicted first, see
        `cache.background_blocks`).

        `hashes[:start]` must be the prefix the caller holds (from `acquire`, or an
        earlier `commit`). `token_blocks` has one entry per hash, or one per hash from
        `start` on. Each result is `(hot id, is_new)`: `is_new` means the caller must
        write the block's KV into that slot; otherwise the block was already cached
        (promoted from HOST if it was there). Stops early, returning a shorter list,
        when no HOT slot can be freed. When the prefix cannot be found registered, or a
        hash is taken by a different block that is in use, the new blocks stay private
        (usable by this caller, never matchable) from there on.
        """
        num_blocks = len(hashes)
        offset = token_blocks_offset(num_blocks, len(token_blocks), start)
        now = self._clock()
        salt = self.salt_for(tenant)
        residency = self._residency
        prefix = verified_run(residency.find, salt, hashes, token_blocks if offset == 0 else None, start)
        can_share = len(prefix) == start
        parent_uid = prefix[-1].uid if start > 0 and can_share else None
        results: list[tuple[int, bool]] = []
        stored: list[BlockHash] = []
        for i in range(start, num_blocks):
            block_hash = hashes[i]
            tokens = token_blocks[i - offset]
            tokens = tokens if type(tokens) is tuple else tuple(tokens)
            if can_share:
                found = residency.find(block_hash)
                if found is not None:
                    if continues(found, parent_uid, salt) and found.tokens == tokens:
                        if not self._reuse(found, tenant, session, now, background):
                            break
                        residency.emit_stored(stored, tenant)
                        results.append((found.id, False))
                        parent_uid = found.uid
                        continue
                    if found.ref_count == 0:
                        residency.forget(found)
                    else:
                        can_share = False
                        self._num_collisions += 1
            if not residency.make_room(Tier.HOT, now, tenant):
                break
            block = self._new_block(tenant, session, salt, hashes, i, tokens, parent_uid, can_share, now, background)
            if can_share:
                stored.append(block_hash)
            results.append((block.id, True))
            parent_uid = block.uid
        residency.emit_stored(stored, tenant)
        return results

    def release(self, block_ids: Sequence[int]) -> None:
        """Drop one reference per HOT id, tail first (the reverse of `block_ids`).

        A cached block left without references becomes evictable; a private one is freed
        at once. Raises ValueError on an id holding no reference (ids after it in the
        list are released by then).
        """
        self._release(Tier.HOT, block_ids)

    # ---- internals -------------------------------------------------------------------

    def _tenant(self, tenant: str) -> TenantStats:
        stats = self._tenants.get(tenant)
        if stats is None:
            stats = TenantStats()
            self._tenants[tenant] = stats
        return stats
