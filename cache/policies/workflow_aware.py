"""KVFlow-style workflow-aware eviction and prefetch: the anchor for "know which agent
runs next".

KVFlow gives every agent a steps-to-execution (how many workflow steps until it runs
again), evicts the blocks of agents farthest from execution first (a shared prefix counts
as close as its closest user), LRU among equals, and copies the blocks of agents that run
in the next step back from CPU memory ahead of time. Here a waiting session is one agent
and its forecast says which step comes next:

- NEXT (one step away): its response asked for a tool, so its next request follows that
  tool (`Forecast.waits_on_tool`);
- LATER: it waits on a user, or nothing is known yet (a session's own request resets it
  to LATER until its new forecast arrives);
- NEVER: the forecast says it most likely ended (`p_end >= 0.5`).

Eviction takes NEVER blocks first, then LATER, then NEXT, least recently released first
within a class; a block's class is the nearest of the sessions that used it
(`BlockMeta.sessions`). Blocks whose class changes (a forecast arrived, normally right
after the session's request) join their new class as its most recent. When a session becomes NEXT its HOST blocks are copied back to HOT
at once, head first, while HOT has a free slot or a block of a farther class to give up,
and again at every tick while it stays NEXT with blocks in HOST (no timing: KVFlow
prefetches for the next step, not for a predicted time). Prefetches are
counted used or wasted (prefetch.py).

Invariants: per tier and class, `_queues` holds exactly the evictable blocks filed under
that class, least recently filed first; `_filed` maps each evictable block to its class
and the sessions it listed when filed; `_users[s]` holds the evictable blocks filed with
session `s`; `_fetch` holds NEXT sessions that may have blocks in HOST.
"""
from __future__ import annotations

from collections import OrderedDict

from cache.block_meta import BlockMeta
from cache.forecast import Forecast
from cache.policies.prefetch import PrefetchCounts, PrefetchTracker
from cache.policy import CacheActions, EvictionPolicy
from cache.tiers import Tier

NEXT, LATER, NEVER = 0, 1, 2
EVICTION_ORDER = (NEVER, LATER, NEXT)


def step_class(forecast: Forecast) -> int:
    """How far from execution the forecast puts its session: NEXT, LATER or NEVER."""
    if forecast.waits_on_tool():
        return NEXT
    if forecast.p_end >= 0.5:
        return NEVER
    return LATER


class WorkflowAwarePolicy(EvictionPolicy):
    """Steps-to-execution eviction with next-step prefetch (see the module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[Tier, tuple[OrderedDict[BlockMeta, None], ...]] = {
            tier: (OrderedDict(), OrderedDict(), OrderedDict()) for tier in Tier}
        self._filed: dict[BlockMeta, tuple[int, tuple[str, ...]]] = {}
        self._users: dict[str, dict[BlockMeta, None]] = {}  # dicts, not sets: a fixed order
        self._step: dict[str, int] = {}
        self._fetch: dict[str, None] = {}
        self._prefetch = PrefetchTracker()

    def prefetch_counts(self) -> PrefetchCounts:
        return self._prefetch.snapshot()

    def session_class(self, session: str) -> int:
        return self._step.get(session, LATER)

    # ---- hooks -------------------------------------------------------------------------

    def on_insert(self, block: BlockMeta, now_s: float) -> None:
        if block.ref_count == 0:
            self._file(block)

    def on_access(self, block: BlockMeta, session: str | None, now_s: float) -> None:
        self._unfile(block)
        if block.tier is Tier.HOT:
            self._prefetch.on_hot_access(block)
        if session is not None:
            self._step.pop(session, None)  # running now: LATER until its next forecast

    def on_release(self, block: BlockMeta, now_s: float) -> None:
        self._file(block)

    def on_remove(self, block: BlockMeta) -> None:
        self._unfile(block)
        if block.tier is Tier.HOT:
            self._prefetch.on_hot_remove(block)

    def choose_victim(self, tier: Tier, now_s: float, tenant: str | None = None) -> int | None:
        found = self._farthest(tier)
        return None if found is None else found[1].id

    def apply(self, forecast: Forecast, actions: CacheActions) -> None:
        session = forecast.session
        if session not in self._users:
            self._step.pop(session, None)
            return  # nothing of it is cached here: nothing to rank or fetch
        step = step_class(forecast)
        if step == LATER:
            self._step.pop(session, None)
        else:
            self._step[session] = step
        queues, filed = self._queues, self._filed
        for block in self._users[session]:
            old, sessions = filed[block]
            new = self._nearest(sessions)
            if new != old:
                del queues[block.tier][old][block]
                queues[block.tier][new][block] = None
                filed[block] = (new, sessions)
        if step == NEXT:
            self._prefetch_session(session, actions)

    def tick(self, now_s: float, actions: CacheActions) -> None:
        for session in list(self._fetch):
            self._prefetch_session(session, actions)

    # ---- internals ---------------------------------------------------------------------

    def _nearest(self, sessions: tuple[str, ...]) -> int:
        if not sessions:
            return LATER
        step = self._step
        return min(step.get(session, LATER) for session in sessions)

    def _file(self, block: BlockMeta) -> None:
        sessions = tuple(block.sessions)
        klass = self._nearest(sessions)
        self._queues[block.tier][klass][block] = None
        self._filed[block] = (klass, sessions)
        for session in sessions:
            self._users.setdefault(session, {})[block] = None
        if klass == NEXT and block.tier is Tier.HOST:
            self._fetch.update((session, None) for session in sessions if self._step.get(session) == NEXT)

    def _unfile(self, block: BlockMeta) -> None:
        filed = self._filed.pop(block, None)
        if filed is None:
            return
        klass, sessions = filed
        del self._queues[block.tier][klass][block]
        users = self._users
        for session in sessions:
            filed = users.get(session)
            if filed is not None:
                filed.pop(block, None)
                if not filed:
                    del users[session]
                    self._step.pop(session, None)  # its class no longer ranks anything

    def _farthest(self, tier: Tier) -> tuple[int, BlockMeta] | None:
        queues = self._queues[tier]
        for klass in EVICTION_ORDER:
            if queues[klass]:
                return klass, next(iter(queues[klass]))
        return None

    def _prefetch_session(self, session: str, actions: CacheActions) -> None:
        """Copy `session`'s HOST blocks to HOT, head first, while their chain is whole and
        room can be had from a farther class; remember it for the next tick while some
        are left."""
        chain = sorted((b for b in self._users.get(session, ()) if b.tier is Tier.HOST),
                       key=lambda b: b.position)
        if not chain or self._step.get(session) != NEXT:
            self._fetch.pop(session, None)
            return
        self._fetch[session] = None
        for block in chain:
            if not block.is_cached or block.tier is not Tier.HOST or block.ref_count:
                break
            if block.parent_hash is not None:
                parent = actions.find(block.parent_hash)
                if parent is None or parent.uid != block.parent_uid:
                    break  # a missing ancestor: the rest of the chain cannot hit
            if actions.num_free_blocks(Tier.HOT) == 0:
                found = self._farthest(Tier.HOT)
                if found is None or found[0] == NEXT:
                    break
            if actions.promote(block.id) is None:
                break
            self._prefetch.mark(block)
