"""The routing decision: which worker serves a request. A pure object, no I/O.

Score per candidate worker w = load(w) - cached prefix tokens w would save (lower is
better). load(w) is the work the request would wait for there, as the worker's tenant-fair
scheduler orders it: the queued prefill tokens of tenants holding no more requests on w
(for their weight) than this tenant would, + `decode_cost_tokens` x active decodes +
`slot_wait_tokens` x requests beyond `slots_per_worker` when this tenant is past its
weighted share of the slots. So one tenant's backlog does not push another tenant's
sessions away from their KV.
First, while some candidate has a free running slot for the request, those where it must
wait for one are dropped, then likewise those whose KV rule would hold it back while some
would admit it (shards/route_slots.py: a slot wait is the rest of a running decode, a KV
wait the rest of its tenant's there; only the session's own worker holding far more of its
prompt stays), so the rules below never queue a request beside a worker that would start it.
Rules, in order:
1. a reservation (a forecast said the session returns soon) keeps the session on its
   worker, unless that worker is gone or past the imbalance gate;
2. session affinity: a session stays where its KV is unless that worker is gone or
   overloaded, i.e. its score is worse than the best by more than
   `affinity_slack_tokens` (its extra load outweighs what its cache saves);
3. tenant home (`tenant_homes`): a request no session ties to a worker goes to its
   tenant's home worker, unless that worker is past the imbalance gate or another holds
   more than `affinity_slack_tokens` more of this prompt. Homes are handed out on a
   tenant's first request, to the worker with the fewest tenants homed on it, and
   rebalanced after a worker comes back (shards/tenant_homes.py: a new session of a tenant
   whose home holds two more homes than a candidate moves the tenant there, its prefix
   copied along as any spill's, whatever the old home holds of it). So a
   tenant's sessions share one copy of its system prompt and tool schemas instead of
   every worker holding every tenant's prefix (each copy is memory the sessions' own KV
   no longer has); a busy tenant still spills over through the gate;
4. the best score wins, unless its load exceeds the least-loaded candidate's by more
   than `imbalance_threshold_tokens`: then the least-loaded worker wins (the gate).
A flex request (`RouteQuery.flex`: batch work, done after the default tier's wherever it
waits) skips rules 1-3 and is charged apart: it goes by score against each worker's whole
load (a tie to the worker fewer tenants call home, away from where their agents' new
sessions go), and a default-tier request's load does not count flex prefill (it goes
first), so batch work spreads over the workers without pulling the agents' sessions after it.
Ties go to the lower load, then the lower worker id (deterministic). "Gone" means not a
candidate (fenced, dead, or at its dispatch limit), or not `usable` now by the engine's
`routable` callback (shards/routability.py: never one being fenced, found dead or silent past
the health timeout; one that missed its last pings only while none is fresh). Such a worker is
never chosen nor copied from: `route` answers None, and the dispatcher keeps the request queued.

Invariants:
- `route` charges the chosen worker's load before returning, and `on_first_token` /
  `on_done` move and release exactly that charge, so decisions made back to back see
  each other (a burst spreads instead of piling on one worker) and loads never drift;
- `remove_worker` drops every charge, affinity, reservation and tenant home naming the
  worker and purges its blocks from the index, so nothing routes to it afterwards.

A shared-prefix transfer is proposed when it is cheaper than the prefill it saves
(shards/transfer_decision.py).

A session that leaves the worker it was last routed to is reported in the decision (`moved_from`),
so that worker's cache policy can stop keeping the session's KV for a return now elsewhere.

`policy` "least_loaded" and "round_robin" are the baselines the benchmark compares
against: they ignore prefixes, sessions and transfers (loads are still tracked).
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from shards.fair_queue import pinned_blocks
from shards.prefix_index import PrefixIndex
from shards.routability import RoutableCallback, usable_workers
from shards.route_records import (ROUTING_POLICIES, Decision, RouteQuery, RouteReason, RouterConfig, RouterStats,
                                  WorkerCosts, WorkerLoad)
from shards.route_slots import kv_candidates, slot_candidates
from shards.tenant_homes import TenantHomes
from shards.transfer_decision import decide_transfer, saved_tokens

RESERVATION_SWEEP_MIN = 1024  # reservations held before expired ones are first swept


@dataclass(slots=True)
class _Charge:
    worker_id: str
    tenant: str
    num_prefill_tokens: int
    is_decoding: bool = False
    flex: bool = False
    num_blocks: int = 0   # the KV blocks it pins there (`pinned_blocks`)


class Router:
    def __init__(self, config: RouterConfig | None = None, routable: RoutableCallback | None = None) -> None:
        """`routable(worker_id, now_s)`: a `Routability` (or a bool) of a worker now (None:
        every worker is fresh; see the module docstring)."""
        self.config = config or RouterConfig()
        self._routable = routable
        if self.config.policy not in ROUTING_POLICIES:
            raise ValueError(f"routing policy must be one of {ROUTING_POLICIES}, not {self.config.policy!r}")
        self._num_round_robin = 0
        self._weights = dict(self.config.tenant_weights)
        self.index = PrefixIndex()
        self._loads: dict[str, WorkerLoad] = {}
        self._costs: dict[str, WorkerCosts] = {}
        self._charges: dict[str, _Charge] = {}
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._reserved: dict[str, tuple[str, float]] = {}   # in the order they were made
        self._reserved_sweep_at = RESERVATION_SWEEP_MIN
        self._homes = TenantHomes()
        self.stats = RouterStats()

    # --- workers ----------------------------------------------------------------------
    def set_weights(self, weights: Mapping[str, float]) -> None:
        """Tenants' weights for the shares computed from now on (its config says them too)."""
        self._weights = dict(weights)
        self.config = dataclasses.replace(self.config, tenant_weights=tuple(sorted(self._weights.items())))

    def add_worker(self, worker_id: str) -> None:
        self._loads.setdefault(worker_id, WorkerLoad())
        self._costs.setdefault(worker_id, WorkerCosts())

    def remove_worker(self, worker_id: str) -> None:
        """Fence: forget the worker's load, charges, sessions, reservations and blocks."""
        self._loads.pop(worker_id, None)
        self._costs.pop(worker_id, None)
        for request_id in [r for r, c in self._charges.items() if c.worker_id == worker_id]:
            del self._charges[request_id]
        for session in [s for s, w in self._sessions.items() if w == worker_id]:
            del self._sessions[session]
        for session in [s for s, (w, _) in self._reserved.items() if w == worker_id]:
            del self._reserved[session]
        self._homes.drop_worker(worker_id)
        self.index.purge(worker_id)

    def workers(self) -> list[str]:
        return sorted(self._loads)

    def load(self, worker_id: str) -> WorkerLoad:
        return self._loads[worker_id]

    def load_tokens(self, worker_id: str, tenant: str | None = None) -> float:
        """The worker's load in prefill-token equivalents: in total, or as a new request
        of `tenant` would see it under the worker's tenant-fair scheduling (`WorkerLoad.tokens`)."""
        return self._loads[worker_id].tokens(self.config, self._weights, tenant)

    def costs(self, worker_id: str) -> WorkerCosts:
        return self._costs[worker_id]

    def home(self, tenant: str) -> str:
        """`tenant`'s home worker, handed out on first use to the worker with the fewest
        homed tenants (then the lower load, then the lower id). Needs a worker."""
        return self._homes.home(tenant, self._loads, self.load_tokens)

    def session_worker(self, session: str) -> str | None:
        return self._sessions.get(session)

    # --- forecasts ----------------------------------------------------------------------
    def reserve(self, session: str, until_s: float, now_s: float) -> str | None:
        """Keep `session` on its current worker until `until_s`; the worker, or None
        when the session has none (then nothing is reserved). Reservations that ran out
        are dropped as new ones come (whenever their number doubles), and there are never
        more than `max_sessions`: sessions that never return leave nothing behind."""
        worker_id = self._sessions.get(session)
        if worker_id is None:
            return None
        self._reserved.pop(session, None)
        self._reserved[session] = (worker_id, until_s)
        if len(self._reserved) > self._reserved_sweep_at:
            for old in [s for s, (_, until) in self._reserved.items() if until < now_s]:
                del self._reserved[old]
            self._reserved_sweep_at = max(RESERVATION_SWEEP_MIN, 2 * len(self._reserved))
        while len(self._reserved) > self.config.max_sessions:
            del self._reserved[next(iter(self._reserved))]   # the least recently made
        return worker_id

    def num_reserved(self, now_s: float) -> int:
        return sum(1 for _, until in self._reserved.values() if until >= now_s)

    # --- the decision ---------------------------------------------------------------------
    def usable(self, workers: Collection[str], now_s: float) -> list[str]:
        """Of `workers`, those a request may be sent to now (`usable_workers`), sorted."""
        return usable_workers(workers, self._routable, now_s)

    def route(self, request_id: str, query: RouteQuery, candidates: Collection[str],
              now_s: float) -> Decision | None:
        """Choose a usable worker among `candidates` and charge it; None (no charge) if none is."""
        live = self.usable([w for w in candidates if w in self._loads], now_s)
        if not live:
            return None
        holders: Collection[str] = (self._loads if self._routable is None   # whose cached runs count: a
                                    else set(live).union(self.usable(self._loads, now_s)))   # copy's source
        if self.config.policy != "prefix":
            return self._route_baseline(request_id, query, live)
        runs = self.index.runs(query.hashes, holders)
        own = None if query.session is None or query.flex else self._sessions.get(query.session)
        # of them, those with a free slot, then KV room, for it while some have (the session's own may stay)
        live = slot_candidates(self.config, self._weights, live, self._loads, self._costs, runs, query, own)
        live = kv_candidates(self.config, self._weights, live, self._loads, self._costs, runs, query, own)
        loads = {w: self.load_tokens(w, None if query.flex else query.tenant) for w in live}
        min_load = min(loads.values())
        threshold = self.config.imbalance_threshold_tokens

        saved = {w: saved_tokens(self.config, runs[w], query.num_prompt_tokens) for w in live}
        scores = {w: loads[w] - saved[w] for w in live}
        homed = self._homes.num_homed if query.flex else {}   # a flex tie goes where fewer agents live
        best = min(live, key=lambda w: (scores[w], loads[w], homed.get(w, 0), w))

        def fits(worker_id: str | None) -> bool:
            return worker_id in loads and loads[worker_id] - min_load <= threshold

        chosen: str | None = None
        reason: RouteReason = "prefix"
        if query.session is not None and not query.flex:
            reserved = self._reserved.get(query.session)
            if reserved is not None and reserved[1] < now_s:
                del self._reserved[query.session]
                reserved = None
            if reserved is not None and fits(reserved[0]):
                chosen, reason = reserved[0], "reserved"
            elif fits(own) and own != best and scores[own] <= scores[best] + self.config.affinity_slack_tokens:
                chosen, reason = own, "affinity"
        if chosen is None and self.config.tenant_homes and own is None and not query.flex:
            home = self.home(query.tenant)
            moved = self._homes.rebalance(query.tenant, [w for w in loads if fits(w)])
            if moved is not None:
                home = moved
                self.stats.num_rehomed += 1
            if (home != best and fits(home)
                    and (moved is not None or saved[best] <= saved[home] + self.config.affinity_slack_tokens)):
                chosen, reason = home, "tenant"
        if chosen is None:
            chosen = best
            if query.flex:
                reason = "flex"
            elif saved[chosen] == 0:
                reason = "least_loaded"
            if loads[chosen] - min_load > threshold:
                chosen = min(live, key=lambda w: (loads[w], w))
                reason = "imbalance"
        decision = decide_transfer(self.config, self._costs, chosen, reason, runs, query)
        if own is not None and own != chosen and own in self._loads:
            decision.moved_from = own
            self.stats.num_session_moves += 1
        self._charge(request_id, decision, query, None if query.flex else query.session)
        return decision

    def _route_baseline(self, request_id: str, query: RouteQuery, live: list[str]) -> Decision:
        if self.config.policy == "round_robin":
            chosen = live[self._num_round_robin % len(live)]
            self._num_round_robin += 1
            reason: RouteReason = "round_robin"
        else:
            chosen = min(live, key=lambda w: (self.load_tokens(w), w))
            reason = "least_loaded"
        decision = Decision(chosen, reason, 0, query.num_prompt_tokens)
        self._charge(request_id, decision, query, None)
        return decision

    def _charge(self, request_id: str, decision: Decision, query: RouteQuery, session: str | None) -> None:
        charge = _Charge(decision.worker_id, query.tenant, decision.num_prefill_tokens, flex=query.flex,
                         num_blocks=pinned_blocks(query.num_prompt_tokens, self.config.block_size))
        self._loads[decision.worker_id].add(charge.tenant, charge.num_prefill_tokens, charge.flex)
        self._charges[request_id] = charge
        stats = self.stats
        stats.num_routed[decision.reason] = stats.num_routed.get(decision.reason, 0) + 1
        stats.num_expected_cached_tokens += decision.num_expected_cached_tokens
        stats.num_transfers += decision.transfer_from is not None
        if session is not None:
            self._sessions[session] = decision.worker_id
            self._sessions.move_to_end(session)
            while len(self._sessions) > self.config.max_sessions:
                self._sessions.popitem(last=False)

    # --- request progress -------------------------------------------------------------------
    def on_first_token(self, request_id: str) -> None:
        """The request's prefill is done: its charge moves from prefill to decode."""
        charge = self._charges.get(request_id)
        if charge is None or charge.is_decoding:
            return
        self._loads[charge.worker_id].start_decode(charge.tenant, charge.num_prefill_tokens, charge.flex,
                                                   num_blocks=charge.num_blocks)
        charge.is_decoding = True

    def on_done(self, request_id: str) -> None:
        """The request ended (finished, failed, cancelled): release its charge."""
        charge = self._charges.pop(request_id, None)
        if charge is None:
            return
        self._loads[charge.worker_id].release(charge.tenant, charge.num_prefill_tokens, charge.flex,
                                              charge.is_decoding, num_blocks=charge.num_blocks)

    def worker_of(self, request_id: str) -> str | None:
        charge = self._charges.get(request_id)
        return charge.worker_id if charge is not None else None
