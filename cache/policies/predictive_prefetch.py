"""The predictive policy's prefetch: bringing a waiting session's chain back to HOT.

A mixin of `PredictivePolicy` (predictive.py), split out by concern; it reads and
writes the policy's own state (the attributes declared below).

A session whose blocks sit in HOST is scheduled at its `prefetch_quantile` return time
minus the copy time (only trusted tenants, once per wait). When due, the chain is copied
back head first once the session likely returns within HOT's horizon
(`prefetch_min_p`) and while it outranks HOT's cheapest block `prefetch_margin` times
over; too early, it is looked at again until the `prefetch_until_quantile` return
time. A chain with a missing ancestor is never copied (it could not hit). Copied blocks
are marked so that their use or waste is counted (prefetch.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from cache.block_meta import BlockMeta
from cache.policies.groups import GroupIndex
from cache.policy import CacheActions
from cache.tiers import Tier

if TYPE_CHECKING:
    from cache.policies.predictive_config import PredictiveConfig
    from cache.policies.prefetch import PrefetchTracker
    from cache.policies.valuation import SessionState


class PrefetchPlanning:
    """When and what the predictive policy copies back from HOST to HOT."""

    config: PredictiveConfig
    _index: GroupIndex
    _sessions: dict[str, SessionState]
    _prefetch: PrefetchTracker

    def _schedule_prefetch(self, name: str, session: SessionState, num_blocks: int, now_s: float) -> None:
        if (not self.config.prefetch or session.return_soon_s is None or session.has_prefetched
                or not self.is_session_trusted(session)):
            return
        due_s = session.return_soon_s - num_blocks * self.config.host_to_hot_s_per_block
        self._prefetch.schedule(name, max(due_s, now_s))

    def _prefetch_now(self, name: str, now_s: float, actions: CacheActions) -> None:
        """Copy a waiting session's HOST chain back to HOT, head first, once it likely
        returns within HOT's horizon and while it outranks HOT's cheapest block; too
        early, look again later (until the late return-time quantile)."""
        session = self._sessions.get(name)
        if session is None or session.curve is None or session.has_prefetched:
            return
        group = self._index.group(Tier.HOST, session.tenant, name)
        if group is None:
            return
        cfg = self.config
        if session.curve.p_within(now_s, self.horizon_s(Tier.HOT)) < cfg.prefetch_min_p:
            retry_s = now_s + max(cfg.min_refresh_s, cfg.refresh_fraction * (now_s - session.curve.made_at_s))
            if session.return_late_s is not None and retry_s <= session.return_late_s:
                self._prefetch.schedule(name, retry_s)
            return
        chain: list[BlockMeta] = []
        block: BlockMeta | None = GroupIndex.victim(group)
        while block is not None:
            if block.tier is Tier.HOST:
                chain.append(block)
            if block.parent_hash is None:
                break
            parent = actions.find(block.parent_hash)
            if parent is None or parent.uid != block.parent_uid:
                return  # a missing ancestor: the chain cannot hit, copying it back is waste
            block = parent
        value = self._value_of(session.tenant, (name,), Tier.HOT, now_s, session.last_use_s)
        for block in reversed(chain):
            if not block.is_cached or block.tier is not Tier.HOST or block.ref_count:
                break
            if actions.num_free_blocks(Tier.HOT) == 0:
                lowest = self._lowest(Tier.HOT, session.tenant)
                if lowest is None or cfg.prefetch_margin * lowest[0] >= value:
                    break
            if actions.promote(block.id) is None:
                break
            self._prefetch.mark(block)
            session.has_prefetched = True  # once per wait: a chain demoted again is not chased
