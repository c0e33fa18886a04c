"""Replaying a request trace through the real block manager and a policy.

Each request, in arrival order and at its arrival time: run the policy's due work
(`tick`, every `tick_interval_s` of trace time), name its session (inferred from prefix
continuity when the trace has none), `match` -> `acquire_run` (hits, promoting HOST blocks)
-> `commit` the rest -> `release`, charge the cost model, then tell the forecast source
and hand the session's new forecast to the manager (`apply`). The same `BlockManager`
and policy classes run in the server; only the clock and the mover are simulated.

Invariants: requests before `measure_from` warm the cache and the learners but are not
counted, in any figure: the eviction and prefetch counts too are those made from the
first measured request on (the counters' difference between then and the end); a
request's hits are the leading run `acquire_run` returned (HOT first, then HOST), so
`block_hit_rate` is exactly "blocks served from cache as the leading run".

The HOST part of a match that HOT has no room to promote is read straight from HOST, as
the worker does (shards/model_runner.py; `acquire_run`, `release_host`): host hits all
the same.

By default a request holds its blocks only while it is served (instantaneous here), so
the replay has no concurrency: every policy sees the same sequence of demands. With
`SimConfig.hold` (`--hold`) a request keeps its references from its arrival until it ends
(its simulated TTFT, then its output at `CostModel.decode_s_per_token`; in_flight.py):
requests overlap as on a worker, and one finds HOT full of blocks in use; a commit that
finds no HOT room then writes the rest through to HOST (`commit_to_host`), as the worker
does. The default mode keeps its published figures: it drops them, as it always has. So
a request that costs no time (no prefill, no decode) holds nothing, and `hold` then gives
the default mode's result, except where a request's own blocks outnumber the hot tier
(only there can a commit come back short with nothing in flight). Hits, costs,
`measure_from` and forecasts are counted the same way in both modes.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cache.block_manager import BlockManager
from cache.forecast_source import ForecastSource, RequestSeen
from cache.gap_forecaster import GapForecaster
from cache.mover import CountingMover
from cache.policies import POLICY_NAMES as SERVER_POLICY_NAMES
from cache.policies import make_policy
from cache.policies.belady import BeladyPolicy
from cache.policies.prefetch import PrefetchCounts
from cache.policies.predictive import PredictivePolicy
from cache.policy import EvictionPolicy
from cache.session_infer import SessionInferrer
from cache.sim.cost_model import CostModel
from cache.sim.in_flight import InFlight
from cache.sim.oracle import next_uses as oracle_next_uses
from cache.sim.requests import SimRequest
from cache.sim.result import SimResult, SimTotals
from cache.tiers import Tier
from cache.tool_call_source import ToolCallSource

POLICY_NAMES = (*SERVER_POLICY_NAMES, "belady")  # the offline oracle runs only here
UNFORECAST_POLICIES = frozenset({"lru", "belady"})   # told no forecasts, so the replay runs no ticks for them


@dataclass(frozen=True, slots=True)
class SimConfig:
    num_hot_blocks: int
    num_host_blocks: int = 0
    policy: str = "lru"
    block_size: int = 16
    cost: CostModel = field(default_factory=CostModel)
    tick_interval_s: float = 0.25
    measure_from: int = 0
    policy_options: tuple[tuple[str, object], ...] = ()
    flex_first: bool = True   # flex requests' blocks go first (cache.background_blocks); not for belady
    hold: bool = False   # a request holds its blocks until it ends (in_flight.py), not only while served


class SimClock:
    """The manager's clock: trace time, set by the replay."""

    __slots__ = ("now_s",)

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def build_policy(config: SimConfig) -> EvictionPolicy:
    if config.policy == "belady":
        return BeladyPolicy()
    options = dict(config.policy_options)
    if config.policy == "predictive":
        options.setdefault("host_to_hot_s_per_block", config.cost.host_to_hot_s_per_block)
    return make_policy(config.policy, **options)


def replay(
    requests: Sequence[SimRequest],
    config: SimConfig,
    source: ForecastSource | None = None,
    on_request: Callable[[int, BlockManager], None] | None = None,
) -> SimResult:
    """Run `requests` through a fresh manager; `source` defaults to a `GapForecaster`
    for the predictive policy and to a `ToolCallSource` (what Continuum and KVFlow are
    told) for the ttl and kvflow anchors; LRU and Belady get no forecasts.
    `on_request(i, manager)` runs after each request (tests use it to inspect the
    manager)."""
    started = time.perf_counter()
    policy = build_policy(config)
    is_predictive = isinstance(policy, PredictivePolicy)
    if config.policy in UNFORECAST_POLICIES:
        source = None
    elif source is None:
        source = GapForecaster() if is_predictive else ToolCallSource()
    next_uses = oracle_next_uses(requests) if isinstance(policy, BeladyPolicy) else None
    clock = SimClock()
    manager = BlockManager(
        num_hot_blocks=config.num_hot_blocks,
        num_host_blocks=config.num_host_blocks,
        block_size=config.block_size,
        policy=policy,
        mover=CountingMover(),
        clock=clock,
        max_pending_events=0,
        evict_background_first=config.flex_first and next_uses is None,   # the oracle bounds every order
    )
    inferrer = SessionInferrer()
    totals = SimTotals()
    interactive = SimTotals() if any(request.flex for request in requests) else None
    cost = config.cost
    size = config.block_size
    interval = config.tick_interval_s
    first_tick = next_tick = requests[0].t_s if requests else 0.0
    num_ticks = 0   # ticks at first + k * interval: a sum of intervals stops growing where an
                    # interval is below the times' float spacing (QA202 F1: 5e15 s, an epoch with 1e-7 s)
    no_tokens: tuple[int, ...] = ()
    in_flight = InFlight(manager, clock)   # empty without `hold`
    write_through = config.hold and config.num_host_blocks > 0   # as the worker (FI95); not in the default mode
    warm_up = _Counters.of(manager, policy)
    for i, request in enumerate(requests):
        if i == config.measure_from and i > 0:
            warm_up = _Counters.of(manager, policy)   # what the warm-up did is not counted
        now = request.t_s
        if interval > 0 and source is not None:
            while next_tick <= now:
                in_flight.release_until(next_tick)
                clock.now_s = next_tick
                manager.tick(next_tick)
                num_ticks += 1
                next_tick = max(first_tick + num_ticks * interval, math.nextafter(next_tick, math.inf))
        in_flight.release_until(now)
        clock.now_s = now
        tenant = request.tenant
        hashes = request.hashes
        flex = request.flex
        # a flex request without a session is a batch line: no session, no forecasts (as the gateway)
        session = request.session or (None if flex else inferrer.session_of(tenant, hashes))
        if next_uses is not None:
            note = policy.note_next_use  # type: ignore[union-attr]
            for block_hash, next_use in zip(hashes, next_uses[i]):
                note(block_hash, next_use)
        match = manager.match(tenant, hashes)
        acquired = manager.acquire_run(tenant, session, match, request.num_prompt_tokens, background=flex)
        manager.release_host(acquired.host_ids)   # read into the request's own cache at once, as the worker
        held = acquired.hot_ids
        num_hits = acquired.num_blocks
        num_hot_hits = min(len(held), len(match.hot_block_ids))
        committed = manager.commit(tenant, session, hashes, [no_tokens] * (len(hashes) - num_hits), num_hits,
                                   background=flex)
        num_done = num_hits + len(committed)
        if write_through and num_done < len(hashes):   # HOT full of blocks in use: the rest to HOST
            manager.commit_to_host(tenant, session, hashes, [no_tokens] * (len(hashes) - num_done), num_done,
                                   background=flex)
        held += [block_id for block_id, _ in committed]
        num_host_hits = num_hits - num_hot_hits
        num_hit_tokens = min(num_hits * size, request.num_prompt_tokens)
        ttft_s = cost.ttft_s(request.num_prompt_tokens - num_hit_tokens, num_host_hits)
        end_s = cost.end_s(now, ttft_s, request.num_output_tokens) if config.hold else now
        if end_s > now:
            in_flight.hold(end_s, held)
        else:   # served at once (no `hold`, or a request that costs no time): released before what follows
            manager.release(held)
        if i >= config.measure_from:
            counted = (request.num_blocks, num_hot_hits, num_host_hits, request.num_prompt_tokens, num_hit_tokens,
                       ttft_s)
            totals.count(*counted)
            if interactive is not None and not flex:
                interactive.count(*counted)
        if source is not None and session is not None:
            source.observe(RequestSeen(tenant, session, now, request.after, request.tool_calls, request.num_blocks))
            forecast = source.forecast(tenant, session, now)
            if forecast is not None:
                manager.apply(forecast)
        if on_request is not None:
            on_request(i, manager)
    in_flight.release_all()
    measured = _Counters.of(manager, policy).minus(warm_up)
    result = SimResult(
        policy=config.policy,
        hot_blocks=config.num_hot_blocks,
        host_blocks=config.num_host_blocks,
        totals=totals,
        num_evictions=measured.num_evictions,
        interactive=interactive,
        num_flex_evictions=measured.num_flex_evictions,
        hold_decode_s_per_token=cost.decode_s_per_token if config.hold else None,
    )
    if measured.prefetch is not None:
        result.num_prefetched_blocks = measured.prefetch.num_prefetched
        result.num_prefetch_used_blocks = measured.prefetch.num_used
        result.num_prefetch_wasted_blocks = measured.prefetch.num_wasted
    result.wall_s = time.perf_counter() - started
    return result


@dataclass(frozen=True, slots=True)
class _Counters:
    """The manager's and the policy's running counts at one moment of a replay; the
    difference of two covers what happened between them."""

    num_evictions: int
    num_flex_evictions: int
    prefetch: PrefetchCounts | None   # None: the policy does not prefetch

    @classmethod
    def of(cls, manager: BlockManager, policy: EvictionPolicy) -> "_Counters":
        hot = manager.stats().tiers[Tier.HOT]
        counts = getattr(policy, "prefetch_counts", None)   # the policies that prefetch have it
        prefetch = counts() if counts is not None else None
        return cls(hot.num_evictions, hot.num_background_evictions, prefetch)

    def minus(self, earlier: "_Counters") -> "_Counters":
        prefetch = None
        if self.prefetch is not None and earlier.prefetch is not None:
            prefetch = PrefetchCounts(self.prefetch.num_prefetched - earlier.prefetch.num_prefetched,
                                      self.prefetch.num_used - earlier.prefetch.num_used,
                                      self.prefetch.num_wasted - earlier.prefetch.num_wasted)
        return _Counters(self.num_evictions - earlier.num_evictions,
                         self.num_flex_evictions - earlier.num_flex_evictions, prefetch)


def split_index(num_requests: int, measure_from_frac: float) -> int:
    """The first measured request when the first `measure_from_frac` only warm up."""
    if not 0.0 <= measure_from_frac < 1.0:
        raise ValueError("measure_from_frac must lie in [0, 1)")
    return math.floor(num_requests * measure_from_frac)
