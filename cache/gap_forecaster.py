"""The built-in forecast source: return gaps learned online from arrival times alone.

Good enough where nothing else is known (a Mooncake trace: no sessions, no steps), and a
fallback beside the HMM predictor. After each served request the session waits on one
*step*: the tool its response called (`"tool:NAME"`), or the user (`"user"`, a text
answer or an unlabelled trace). When the session's next request arrives, the gap since
the previous arrival is learned under that step; a session that has not come back after
the `expire_quantile` of its gap distribution counts as ended (and is counted back as a
return if it shows up later after all). Estimates shrink level by level
(`cache.gap_stats`): all tenants -> tenant -> step -> step at this depth (log2 buckets of
the session's request count) -> the session's own gaps at this step (location only).
P(return) goes one level further per feature: depth -> text answers so far (up to
`answers_cap`; on labelled traces only, where it counts the session's turns, and
agents' sessions end after a number of turns, not at random) -> prompt size.

The forecast is the unconditional curve from the session's last arrival (`made_at_s`):
P(return within h) = p_return * F(h) at log-normal quantile points; the policy
conditions on the time already waited. `confident` once the tenant has
`min_outcomes` resolved waits. P(return) treats waits still pending as censored
(`censored_p_return`), re-estimated every `recount_every` requests in one pass over
the waiting sessions, level by level from the top, for the tenants with waits pending or
changed since the last recount (an idle tenant's estimates stand).

Invariants: O(1) amortised work per request plus, per `recount_every` requests, one pass
over the waiting sessions and one vectorized EM per level of the all-tenant level and of
the tenants with waits pending or changed (`cache.gap_levels`), never of every tenant's
levels; at most `max_sessions` waiting
sessions are remembered (for room, the oldest of the tenant with the most waiting, a new
one counted: `cache.tenant_sessions`, so one tenant's flood never drops another's within
its share; `forget` drops an ended one); a request whose arrival time is not finite is
not learned (a NaN deadline would stop every later expiry, a NaN gap every estimate);
return counts never go negative; nothing does I/O.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np

from cache.forecast import END_SYMBOL, USER_SYMBOL, Forecast, tool_step
from cache.forecast_source import RequestSeen
from cache.gap_estimates import GapEstimates
from cache.gap_levels import GapLevels
from cache.gap_memory import LearnedGaps
from cache.gap_forecaster_config import GapForecasterConfig
from cache.gap_stats import LogGapStats, LogNormalGap, ReturnCounts, censored_p_return
from cache.tenant_sessions import TenantSessions

USER_STEP = "user"
OTHER_STEP = "tool:<oov>"   # a tenant's waits past `max_steps_per_tenant` distinct ones
_NORMAL = NormalDist()


@dataclass(slots=True)
class _Waiting:
    """A session between its latest request and the next."""

    t_s: float
    step: str
    depth: int
    answers: int
    context: tuple[int, ...]
    seq: int
    is_ended: bool = False
    own: dict[str, LogGapStats] = field(default_factory=dict)


def step_of(tool_calls: tuple[str, ...]) -> str:
    """What a session waits on after a response: its tool calls (each `tool:` and its step
    name, `tool_step`: so no tool is the pooled OTHER_STEP), or the user."""
    return ",".join(f"tool:{tool_step(name)}" for name in tool_calls) if tool_calls else USER_STEP


def _bucket(count: int, top: int) -> int:
    """log2 bucket of a count: 0, 1, 2-3, 4-7, ... capped at `top`."""
    return min(count.bit_length(), top)


class GapForecaster(GapEstimates):
    """A `ForecastSource` over per-(tenant, step) log-normal return gaps."""

    def __init__(self, config: GapForecasterConfig | None = None) -> None:
        self.config = config or GapForecasterConfig()
        self._return_features = (0,) + ((1,) if self.config.answers_cap else ()) + (
            (2,) if self.config.use_prompt_size else ())
        self._prior = LogNormalGap(math.log(self.config.prior_median_s), self.config.prior_sigma)
        self._stats = GapLevels()
        self._waiting: dict[tuple[str, str], _Waiting] = {}
        self._by_tenant = TenantSessions()   # the same keys per tenant: which to drop for room
        self._deadlines: list[tuple[float, int, tuple[str, str]]] = []
        self._seq = 0
        self._num_since_recount = 0

    # ---- learning -----------------------------------------------------------------

    def observe(self, request: RequestSeen) -> None:
        now = request.t_s
        if not math.isfinite(now):
            return
        self._expire(now)
        key = (request.tenant, request.session)
        self._stats.changed(request.tenant)
        waiting = self._waiting.pop(key, None)
        if waiting is not None:
            self._by_tenant.remove(*key)
            gap_s = max(0.0, now - waiting.t_s)
            for level in self._gap_levels(request.tenant, waiting.step, waiting.context):
                self._stats.gap_stats(level).add(gap_s)
            for level in self._levels(request.tenant, waiting.step, waiting.context):
                counts = self._stats.return_counts(level)
                counts.num_returned += 1.0
                if waiting.is_ended and counts.num_ended >= 1.0:   # (statistics adopted since: 0)
                    counts.num_ended -= 1.0
            own = waiting.own
            step_own = own.get(waiting.step)
            if step_own is None:
                step_own = own[waiting.step] = LogGapStats()
            step_own.add(gap_s)
            depth = waiting.depth + 1
            answers = waiting.answers
        else:
            own = {}
            depth = answers = 0
        answers += not request.tool_calls
        self._seq += 1
        labelled = request.after is not None  # else every response looks like a text answer
        context = (_bucket(depth, 4), min(answers, self.config.answers_cap) if labelled else None,
                   _bucket(request.num_blocks, 12))
        step = step_of(request.tool_calls)
        known = self._stats.steps.setdefault(request.tenant, set())
        if step not in known:
            if len(known) >= self.config.max_steps_per_tenant:
                step = OTHER_STEP
            known.add(step)
        waiting = _Waiting(now, step, depth, answers, context, self._seq, own=own)
        while self._waiting and len(self._waiting) >= self.config.max_sessions:
            dropped = self._by_tenant.to_evict(request.tenant)   # the oldest of the tenant waiting most
            del self._waiting[dropped]
            self._by_tenant.remove(*dropped)
            self._stats.unsettle(dropped[0])
        self._waiting[key] = waiting
        self._by_tenant.add(*key)
        gap = self._gap(request.tenant, waiting)
        deadline = now + gap.quantile_s(self.config.expire_quantile)
        heapq.heappush(self._deadlines, (deadline, waiting.seq, key))
        self._num_since_recount += 1
        if self._num_since_recount >= self.config.recount_every:
            self._recount(now)

    def forget(self, tenant: str, session: str) -> None:
        """The session is over (whoever drives this source knows it, as the gateway does
        after its idle timeout): stop remembering it; a wait still pending counts as ended.
        Keeps the waiting sessions, and each recount, to the live ones."""
        waiting = self._waiting.pop((tenant, session), None)
        if waiting is not None:
            self._by_tenant.remove(tenant, session)
        if waiting is not None and not waiting.is_ended:
            self._stats.changed(tenant)
            for level in self._levels(tenant, waiting.step, waiting.context):
                self._stats.return_counts(level).num_ended += 1.0

    def learned(self, tenants: Iterable[str] | None = None) -> LearnedGaps:
        """Every level's statistics (copies), without the waiting sessions: what a restart
        keeps (`cache.gap_files`). With `tenants`, only theirs and the all-tenant level
        (work in proportion to their levels, not to every tenant's)."""
        return self._stats.learned(self._return_features, tenants)

    def change_marks(self) -> dict[str, int]:
        """Per tenant, a count that grows whenever its gaps, return counts or waits change
        (a recount's new P(return) estimates alone do not count)."""
        return self._stats.change_marks()

    @property
    def return_features(self) -> tuple[int, ...]:
        """The context features its return levels are split by (what `learned` says and
        `adopt` requires)."""
        return self._return_features

    def adopt(self, learned: LearnedGaps) -> None:
        """Resume from `learned` (replacing every statistic; waiting sessions are kept).
        ValueError if it was split by other context features than this configuration's."""
        if tuple(learned.return_features) != self._return_features:
            raise ValueError(f"learned with return features {learned.return_features}, "
                             f"configured for {self._return_features}")
        self._stats.adopt(learned)

    def _recount(self, now_s: float) -> None:
        """Re-estimate P(return), pending waits counted as censored, at the all-tenant
        level and every level of each tenant that has waits pending or changed since the
        last recount; the others' counts are as they were and none of their waits are
        pending, so their estimates stand (against the all-tenant estimate of when they
        were last redone: work per recount follows the active tenants, not all of them).

        The pending waits are grouped by their deepest level first (one gap distribution
        each), so the per-wait work is one CDF; each level's EM then runs over the
        arrays of the groups below it (`censored_p_return`, vectorized)."""
        self._num_since_recount = 0
        elapsed_by_key: dict[tuple, list[float]] = {}
        for (tenant, _), waiting in self._waiting.items():
            if not waiting.is_ended:
                elapsed_by_key.setdefault((tenant, waiting.step, waiting.context), []).append(now_s - waiting.t_s)
        pending_parts: dict[tuple, list[np.ndarray]] = {}
        for (tenant, step, context), elapsed in elapsed_by_key.items():
            gap = self.gap_distribution(tenant, step, context)
            done = np.fromiter((_NORMAL.cdf((math.log(e) - gap.mu) / gap.sigma) if e > 0 else 0.0
                                for e in elapsed), dtype=np.float64, count=len(elapsed))
            for level in self._levels(tenant, step, context):
                parts = pending_parts.get(level)
                if parts is None:
                    parts = pending_parts[level] = []
                    if level not in self._stats.returns:   # its estimate is the tenant's too
                        self._stats.index(level)
                parts.append(done)
        pending = {level: parts[0] if len(parts) == 1 else np.concatenate(parts)
                   for level, parts in pending_parts.items()}
        tenants = self._stats.take_unsettled() | {tenant for tenant, _, _ in elapsed_by_key}
        estimates, returns = self._stats.p_estimates, self._stats.returns
        strength, prior_p = self.config.return_strength, self.config.prior_p_return
        for level in [(), *sorted((level for t in tenants for level in self._stats.levels_of(t)), key=len)]:
            counts, waits = returns.get(level), pending.get(level)
            if counts is None and waits is None:
                estimates.pop(level, None)   # waits that were pending here were dropped
                continue
            parent_p = estimates.get(level[:-1], prior_p) if level else prior_p
            estimates[level] = censored_p_return(counts or ReturnCounts(), [] if waits is None else waits,
                                                 parent_p, strength)

    def _expire(self, now_s: float) -> None:
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_s:
            _, seq, key = heapq.heappop(deadlines)
            waiting = self._waiting.get(key)
            if waiting is None or waiting.seq != seq or waiting.is_ended:
                continue
            waiting.is_ended = True
            self._stats.changed(key[0])
            for level in self._levels(key[0], waiting.step, waiting.context):
                self._stats.return_counts(level).num_ended += 1.0

    # ---- forecasting --------------------------------------------------------------

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        self._expire(now_s)
        waiting = self._waiting.get((tenant, session))
        if waiting is None:
            return None
        gap = self._gap(tenant, waiting)
        p_return = self._p_return(tenant, waiting)
        points = gap.return_points(p_return)
        etas = gap.eta_quantiles(self.config.quantiles)
        step = waiting.step
        # a tool's step name as `step_of` wrote it, or the pooled waits' bucket (`<oov>`)
        next_name = step.split(",")[0][len("tool:"):] if step.startswith("tool:") else USER_SYMBOL
        confident = self.num_resolved(tenant) >= self.config.min_outcomes
        return Forecast(
            tenant=tenant,
            session=session,
            made_at_s=waiting.t_s,
            next_step={next_name: p_return, END_SYMBOL: 1.0 - p_return},
            p_end=1.0 - p_return,
            p_return_within=points,
            eta_quantiles_s=etas,
            confident=confident,
        )

    def learned_tenants(self) -> list[str]:
        """Every tenant seen (a first request is enough)."""
        return list(self._stats.steps)

    def num_resolved(self, tenant: str) -> float:
        """The tenant's waits that ended in a return or were given up as ends: its
        forecasts are `confident` from `config.min_outcomes` on."""
        counts = self._stats.returns.get((tenant,))
        return 0.0 if counts is None else counts.num_resolved
