"""The routing decision: which worker serves a request. A pure object, no I/O.

Score per candidate worker w = cached prefix tokens w would save - load(w), where
load(w) = queued prefill tokens + `decode_cost_tokens` x active decodes. Rules, in order:
1. a reservation (a forecast said the session returns soon) keeps the session on its
   worker, unless that worker is gone or overloaded;
2. session affinity: a session stays where its KV is, with the same exceptions;
3. the best score wins, unless its load exceeds the least-loaded candidate's by more
   than `imbalance_threshold_tokens`: then the least-loaded worker wins (the gate).
Ties go to the lower load, then the lower worker id (deterministic).

"Overloaded" means load(w) - min load > the imbalance threshold; "gone" means not a
candidate (fenced, dead, or at its dispatch limit).

Invariants:
- `route` charges the chosen worker's load before returning, and `on_first_token` /
  `on_done` move and release exactly that charge, so decisions made back to back see
  each other (a burst spreads instead of piling on one worker) and loads never drift;
- `remove_worker` drops every charge, affinity and reservation naming the worker and
  purges its blocks from the index, so nothing routes to it afterwards.

A shared-prefix transfer is proposed when the chosen worker lacks HOT blocks a peer
holds and the measured cost of copying them (export + import per block, plus one round
trip) is below the measured cost of prefilling them.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Literal

from cache.hashing import BlockHash
from shards.prefix_index import PrefixIndex, PrefixRun

RouteReason = Literal["reserved", "affinity", "prefix", "least_loaded", "imbalance"]


@dataclass(frozen=True, slots=True)
class RouterConfig:
    block_size: int = 16
    decode_cost_tokens: float = 32.0
    host_hit_weight: float = 0.5
    imbalance_threshold_tokens: float = 2048.0
    max_sessions: int = 100_000
    can_transfer: bool = True
    min_transfer_blocks: int = 2


@dataclass(slots=True)
class WorkerCosts:
    """Measured costs of one worker; None until measured."""

    prefill_s_per_token: float | None = None
    export_s_per_block: float | None = None
    import_s_per_block: float | None = None
    round_trip_s: float = 0.002


@dataclass(slots=True)
class WorkerLoad:
    num_queued_prefill_tokens: int = 0
    num_active_decodes: int = 0
    num_outstanding: int = 0


@dataclass(frozen=True, slots=True)
class RouteQuery:
    tenant: str
    session: str | None
    hashes: Sequence[BlockHash]
    num_prompt_tokens: int


@dataclass(slots=True)
class Decision:
    worker_id: str
    reason: RouteReason
    num_expected_cached_tokens: int
    num_prefill_tokens: int
    transfer_from: str | None = None
    num_transfer_blocks: int = 0


@dataclass(slots=True)
class _Charge:
    worker_id: str
    num_prefill_tokens: int
    is_decoding: bool = False


@dataclass(slots=True)
class RouterStats:
    num_routed: dict[str, int] = field(default_factory=dict)
    num_transfers: int = 0
    num_expected_cached_tokens: int = 0


class Router:
    def __init__(self, config: RouterConfig | None = None) -> None:
        self.config = config or RouterConfig()
        self.index = PrefixIndex()
        self._loads: dict[str, WorkerLoad] = {}
        self._costs: dict[str, WorkerCosts] = {}
        self._charges: dict[str, _Charge] = {}
        self._sessions: OrderedDict[str, str] = OrderedDict()
        self._reserved: dict[str, tuple[str, float]] = {}
        self.stats = RouterStats()

    # --- workers ----------------------------------------------------------------------
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
        self.index.purge(worker_id)

    def workers(self) -> list[str]:
        return sorted(self._loads)

    def load(self, worker_id: str) -> WorkerLoad:
        return self._loads[worker_id]

    def load_tokens(self, worker_id: str) -> float:
        load = self._loads[worker_id]
        return load.num_queued_prefill_tokens + self.config.decode_cost_tokens * load.num_active_decodes

    def costs(self, worker_id: str) -> WorkerCosts:
        return self._costs[worker_id]

    def session_worker(self, session: str) -> str | None:
        return self._sessions.get(session)

    # --- forecasts ----------------------------------------------------------------------
    def reserve(self, session: str, until_s: float) -> str | None:
        """Keep `session` on its current worker until `until_s`; the worker, or None
        when the session has none (then nothing is reserved)."""
        worker_id = self._sessions.get(session)
        if worker_id is not None:
            self._reserved[session] = (worker_id, until_s)
        return worker_id

    def num_reserved(self, now_s: float) -> int:
        return sum(1 for _, until in self._reserved.values() if until >= now_s)

    # --- the decision ---------------------------------------------------------------------
    def route(self, request_id: str, query: RouteQuery, candidates: Collection[str],
              now_s: float) -> Decision | None:
        """Choose a worker among `candidates` and charge it; None when there are none."""
        live = sorted(w for w in candidates if w in self._loads)
        if not live:
            return None
        runs = self.index.runs(query.hashes, self._loads)
        loads = {w: self.load_tokens(w) for w in live}
        min_load = min(loads.values())
        threshold = self.config.imbalance_threshold_tokens

        def fits(worker_id: str | None) -> bool:
            return worker_id in loads and loads[worker_id] - min_load <= threshold

        chosen: str | None = None
        reason: RouteReason = "prefix"
        if query.session is not None:
            reserved = self._reserved.get(query.session)
            if reserved is not None and reserved[1] < now_s:
                del self._reserved[query.session]
                reserved = None
            if reserved is not None and fits(reserved[0]):
                chosen, reason = reserved[0], "reserved"
            elif fits(self._sessions.get(query.session)):
                chosen, reason = self._sessions[query.session], "affinity"
        if chosen is None:
            saved = {w: self._saved_tokens(runs[w], query.num_prompt_tokens) for w in live}
            chosen = min(live, key=lambda w: (loads[w] - saved[w], loads[w], w))
            if saved[chosen] == 0:
                reason = "least_loaded"
            if loads[chosen] - min_load > threshold:
                chosen = min(live, key=lambda w: (loads[w], w))
                reason = "imbalance"
        decision = self._decide_transfer(chosen, reason, runs, query)
        self._charge(request_id, decision, query.session)
        return decision

    def _saved_tokens(self, run: PrefixRun, num_prompt_tokens: int) -> int:
        size = self.config.block_size
        saved = run.num_hot_blocks * size + self.config.host_hit_weight * run.num_host_blocks * size
        return int(min(saved, max(0, num_prompt_tokens - 1)))

    def _decide_transfer(self, chosen: str, reason: RouteReason, runs: dict[str, PrefixRun],
                         query: RouteQuery) -> Decision:
        own = runs[chosen]
        expected = self._saved_tokens(own, query.num_prompt_tokens)
        decision = Decision(chosen, reason, expected, query.num_prompt_tokens - expected)
        if not self.config.can_transfer:
            return decision
        holder = max(runs, key=lambda w: (runs[w].num_hot_blocks, w == chosen))
        num_missing = runs[holder].num_hot_blocks - own.num_blocks
        if holder == chosen or num_missing < self.config.min_transfer_blocks:
            return decision
        src, dst = self._costs[holder], self._costs[chosen]
        if None in (src.export_s_per_block, dst.import_s_per_block, dst.prefill_s_per_token):
            return decision
        recompute_s = num_missing * self.config.block_size * dst.prefill_s_per_token
        # NOTE: only the export adds a hop; the import travels just ahead of the request
        transfer_s = num_missing * (src.export_s_per_block + dst.import_s_per_block) + src.round_trip_s
        if transfer_s >= recompute_s:
            return decision
        run = PrefixRun(runs[holder].num_hot_blocks, 0)
        expected = self._saved_tokens(run, query.num_prompt_tokens)
        return Decision(chosen, reason, expected, query.num_prompt_tokens - expected,
                        transfer_from=holder, num_transfer_blocks=run.num_hot_blocks)

    def _charge(self, request_id: str, decision: Decision, session: str | None) -> None:
        load = self._loads[decision.worker_id]
        load.num_queued_prefill_tokens += decision.num_prefill_tokens
        load.num_outstanding += 1
        self._charges[request_id] = _Charge(decision.worker_id, decision.num_prefill_tokens)
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
        load = self._loads[charge.worker_id]
        load.num_queued_prefill_tokens -= charge.num_prefill_tokens
        load.num_active_decodes += 1
        charge.is_decoding = True

    def on_done(self, request_id: str) -> None:
        """The request ended (finished, failed, cancelled): release its charge."""
        charge = self._charges.pop(request_id, None)
        if charge is None:
            return
        load = self._loads[charge.worker_id]
        if charge.is_decoding:
            load.num_active_decodes -= 1
        else:
            load.num_queued_prefill_tokens -= charge.num_prefill_tokens
        load.num_outstanding -= 1

    def worker_of(self, request_id: str) -> str | None:
        charge = self._charges.get(request_id)
        return charge.worker_id if charge is not None else None
