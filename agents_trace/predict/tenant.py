"""Everything the predictor knows about one tenant, and nothing about any other.

`TenantState` holds the tenant's learned model, its sessions and what it learns and
observes in them; what it predicts from them is its base class `TenantForecasts`
(tenant_forecasts.py).

Lock discipline: every public method takes `lock` for its whole (short, fit-free) body.
The fitted `model` is immutable and replaced whole by `install`, so a refit computed
outside the lock swaps in atomically. Isolation: a tenant's model, memory, durations and
accuracy are built from its own sessions only; the only shared input is the read-only
global class model used while the tenant is cold (cold_start.py).

Bounds: a step's tool name is cut to `MAX_CLIENT_ID_CHARS` where it enters
(`step_symbol`), and the tenant keeps counts and gap statistics of at most
`vocabulary.MAX_KNOWN_TOOLS` tool names (`tool_counts` and `live_tools` together, and the
tools of `durations`): when a new name would pass that, the least-used quarter (the
oldest first among equals) is forgotten, their counts and gaps pooled under
`OTHER_TOOL_SYMBOL`, the bucket a capped vocabulary already puts unknown tools in.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Sequence

import numpy as np

from cache.forecast import END_SYMBOL

from .accuracy import AccuracyTracker
from .config import PredictorConfig
from .durations import DurationModel
from .gap_distributions import GapStats
from .pending_tools import AbandonCounts
from .recency import RecencyMemory
from .session import SessionState
from .step_model import StepModel
from .tenant_forecasts import ColdVocab, TenantForecasts
from .turns import TurnCalibration
from .vocabulary import BASE_SYMBOLS, MAX_KNOWN_TOOLS, OTHER_TOOL_SYMBOL, step_symbol, with_end

_SWEEP_EVERY_NEW_SESSIONS = 256


class TenantState(TenantForecasts):
    """Invariants: `_version` changes whenever anything a prediction depends on changes
    (model, recency memory, learned sessions), so cached predictions compare versions;
    `_tools_version` changes only when `tool_counts` or `live_tools` does (cold
    vocabulary); `tool_counts` and `live_tools` hold no name in common, together at
    most `MAX_KNOWN_TOOLS` names, as `durations` holds at most as many tools' gaps
    (module docstring); `num_changes` grows with every change of what a checkpoint saves
    (`persist.tenant_to_parts`: all but the live sessions), so an unchanged tenant is not
    written again; `_named_waits` holds the live sessions whose last response asked for
    tools, until the next one (the steps that follow were named, not guessed)."""

    def __init__(self, name: str, config: PredictorConfig) -> None:
        self.name = name
        self.config = config
        self.lock = threading.Lock()
        self.model: StepModel | None = None
        self.sessions: dict[str, SessionState] = {}
        self.finished: deque[tuple[str, ...]] = deque(maxlen=config.max_fit_sessions)
        self.memory = RecencyMemory(config.default_recency_decay, config.max_recent_sessions)
        self.durations = DurationModel(config.durations)
        self.accuracy = AccuracyTracker(config.half_life_steps)
        self.abandons = AbandonCounts()
        self.turns = TurnCalibration()  # belongs to `model` (turns.py)
        self.tool_counts: dict[str, int] = {}
        self.live_tools: dict[str, None] = {}  # run in live sessions, not yet learned (not in tool_counts)
        self._named_waits: set[str] = set()
        self.num_learned = 0
        self.num_learned_at_fit = 0
        self._version = 0
        self._tools_version = 0
        self.num_changes = 0
        self._num_new_sessions = 0
        self._cold_vocab: ColdVocab | None = None
        self._start_template: SessionState | None = None
        self.horizons_s = np.asarray(config.horizons_s, dtype=np.float64)
        self.quantiles = np.asarray(config.quantiles, dtype=np.float64)

    # -- learning -------------------------------------------------------------------
    def _learn_locked(self, sequence: tuple[str, ...], remember: bool) -> None:
        self.finished.append(sequence)
        if remember:
            self.memory.learn(sequence)
        for symbol in sequence:
            if symbol not in BASE_SYMBOLS:
                count = self.tool_counts.get(symbol)
                if count is None:
                    if symbol in self.live_tools:
                        del self.live_tools[symbol]
                    else:
                        self._make_room_locked()
                    count = 0
                self.tool_counts[symbol] = count + 1
        self.num_learned += 1
        self._version += 1
        self._tools_version += 1
        self.num_changes += 1

    def learn_sequences(self, sequences: Sequence[Sequence[str]],
                        gaps: Sequence[Sequence[float | None]] | None,
                        remember: bool) -> list[tuple[str, ...]]:
        """Record finished sessions (END appended where missing) and their gaps."""
        learned = []
        with self.lock:
            for i, seq in enumerate(sequences):
                seq = [step_symbol(symbol) for symbol in seq]
                full = tuple(with_end(seq))
                self._learn_locked(full, remember)
                learned.append(full)
                if gaps is not None and i < len(gaps):
                    for symbol, gap_s in zip(seq, gaps[i]):
                        if gap_s is not None:
                            # a name of this session forgotten to make room for a later one is pooled
                            known = symbol in BASE_SYMBOLS or symbol in self.tool_counts
                            self.durations.observe(symbol if known else OTHER_TOOL_SYMBOL, gap_s)
        return learned

    def remember(self, sequence: Sequence[str], global_model: StepModel | None) -> None:
        with self.lock:
            self.memory.learn(tuple(with_end([step_symbol(symbol) for symbol in sequence])))
            self._version += 1
            self.num_changes += 1
            self._refresh_start_locked(global_model)

    def snapshot(self) -> tuple[list[tuple[str, ...]], int]:
        with self.lock:
            return list(self.finished), self.num_learned

    def install(self, model: StepModel, num_learned_at_fit: int,
                global_model: StepModel | None = None,
                turns: TurnCalibration | None = None) -> None:
        """Swap in a freshly fitted model and its turn calibration (atomic for readers)
        and seed its accuracy."""
        with self.lock:
            if model.recency is not None and model.recency.decay != self.memory.decay:
                self.memory = self.memory.rebuilt(model.recency.decay)
            report = model.report
            if report.val_top1 is not None and report.val_logloss is not None:
                self.accuracy.seed(report.val_top1, report.val_logloss,
                                   float(report.num_val_symbols))
            self.model = model
            self.turns = turns or TurnCalibration()
            self.num_learned_at_fit = num_learned_at_fit
            self._version += 1
            self.num_changes += 1
            # Prepare what the first forecasts under the new model need (prediction,
            # duration table), here on the refit thread rather than on the request path.
            self._refresh_start_locked(global_model)

    # -- live sessions --------------------------------------------------------------
    def observe(self, session: str, symbol: str, t_s: float, gap_s: float | None,
                global_model: StepModel | None) -> None:
        """Score the step against the current forecast when that was a real guess, learn
        its gap, filter it in. `END` for a session none of whose steps was observed does
        nothing.

        A real guess (the trust, accuracy.py) is the forecast for a request-bearing step
        (or END) of a session already seen, while it does not wait on tools its last
        response asked for: not a session's first step (always `USER`), not a silent
        step (no request follows it at once), not the tool steps (or the abandon) that
        follow a tool-calling response, which named them. Each real guess is scored
        twice: in the tenant's trust and in the session's own run of misses
        (`SessionState.guess_misses`, which gates that session's confidence)."""
        symbol = step_symbol(symbol)
        with self.lock:
            state = self.sessions.get(session)
            if state is None and symbol == END_SYMBOL:
                return   # no step of it was seen (refused requests only, QA124): nothing to score or learn
            guessed = (state is not None and symbol not in self.config.silent_symbols
                       and session not in self._named_waits)
            if state is None:
                state = self._start_state_locked(t_s, global_model)
                self.sessions[session] = state
                self._num_new_sessions += 1
                if self._num_new_sessions % _SWEEP_EVERY_NEW_SESSIONS == 0:
                    self._drop_idle_locked(t_s)
            self.num_changes += 1   # accuracy, durations, abandons
            if guessed:
                before = self._current_locked(state, global_model)
                target = before.vocab.encode_one(symbol)
                hit = int(np.argmax(before.p1)) == target
                self.accuracy.record(float(before.p1[target]), hit)
                state.score_guess(hit)
            if state.pending:
                self.abandons.record(symbol)
                state.pending = ()
                state.pending_prediction = None
            if symbol not in BASE_SYMBOLS and symbol not in self.tool_counts and symbol not in self.live_tools:
                self._see_tool_locked(symbol)
            if gap_s is not None:
                self.durations.observe(symbol, gap_s)
            state.advance(symbol, self.config.max_history_steps, self.config.silent_symbols)
            state.last_step_s = state.waiting_since_s = t_s
            # Filter forward now, so that the forecasts while the session waits are
            # cheap: the next prediction is computed once, here.
            self._mixture_locked(self._predict_locked(state, global_model))

    def mark_waiting(self, session: str, t_s: float, tool_calls: Sequence[str] = ()) -> None:
        with self.lock:
            state = self.sessions.get(session)
            if state is not None:
                state.waiting_since_s = max(state.waiting_since_s, t_s)
                state.pending = tuple(step_symbol(symbol) for symbol in tool_calls)
                state.pending_prediction = None
                if state.pending:
                    self._named_waits.add(session)
                else:
                    self._named_waits.discard(session)

    def end_session(self, session: str, learn: bool, global_model: StepModel | None
                    ) -> tuple[str, ...] | None:
        """Forget the live session; when `learn`, record it as finished and return it."""
        with self.lock:
            state = self.sessions.pop(session, None)
            self._named_waits.discard(session)
            if state is None or not learn or not state.history:
                return None
            sequence = tuple(with_end(state.learned()))
            self._learn_locked(sequence, remember=True)
            self._refresh_start_locked(global_model)
            return sequence

    def _drop_idle_locked(self, now_s: float) -> None:
        cutoff = now_s - self.config.session_ttl_s
        for key in [k for k, s in self.sessions.items() if s.last_step_s < cutoff]:
            del self.sessions[key]
            self._named_waits.discard(key)

    def _see_tool_locked(self, symbol: str) -> None:
        """A tool this tenant never ran before ran in a live session: a cold tenant's
        vocabulary names it from now on (its own duration, not the unknown tool's),
        counted once until a finished session teaches its real count."""
        self._make_room_locked()
        self.live_tools[symbol] = None
        self._tools_version += 1
        if self.model is None:
            self._version += 1  # cold predictions were made over the old vocabulary
            self._cold_vocab_added_locked(symbol, self._tools_version - 1)

    def _make_room_locked(self) -> None:
        """Room for one more tool name: when `MAX_KNOWN_TOOLS` are known, the least-used
        quarter is forgotten (amortised O(log n) a new name)."""
        if len(self.tool_counts) + len(self.live_tools) >= MAX_KNOWN_TOOLS:
            self._forget_rare_tools_locked()

    def bound_tools(self) -> None:
        """Bring a tenant read from a file saved before names were bounded (or with
        more gap statistics than known names) within the bound."""
        with self.lock:
            tools = sum(1 for s in self.durations.by_symbol if s not in BASE_SYMBOLS)
            if max(tools, len(self.tool_counts) + len(self.live_tools)) > MAX_KNOWN_TOOLS:
                self._forget_rare_tools_locked()

    def _forget_rare_tools_locked(self) -> None:
        """Keep the `MAX_KNOWN_TOOLS - MAX_KNOWN_TOOLS // 4` most used tool names (a live
        one counts 1; among equals the newest); the others' counts and gap statistics join
        `OTHER_TOOL_SYMBOL`'s, and so do the gaps of names no longer known, fewest first,
        while more tools than that have gaps."""
        keep = MAX_KNOWN_TOOLS - MAX_KNOWN_TOOLS // 4
        by_symbol = self.durations.by_symbol
        ranked = [*self.tool_counts.items(), *((name, 1) for name in self.live_tools)]
        ranked.sort(key=lambda kv: kv[1])   # stable: the oldest first among equal counts
        pooled = 0
        for name, count in ranked[:max(0, len(ranked) - keep)]:
            if name == OTHER_TOOL_SYMBOL:
                continue
            pooled += self.tool_counts.pop(name, 0)
            self.live_tools.pop(name, None)
            self._pool_gaps_locked(by_symbol.pop(name, None))
        if pooled:
            self.tool_counts[OTHER_TOOL_SYMBOL] = self.tool_counts.get(OTHER_TOOL_SYMBOL, 0) + pooled
        tools = [(name, stats) for name, stats in by_symbol.items()
                 if name not in BASE_SYMBOLS and name != OTHER_TOOL_SYMBOL]
        if len(tools) > keep:
            unknown = [kv for kv in tools if kv[0] not in self.tool_counts and kv[0] not in self.live_tools]
            unknown.sort(key=lambda kv: kv[1].num_gaps)
            for name, stats in unknown[:len(tools) - keep]:
                del by_symbol[name]
                self._pool_gaps_locked(stats)
        self._tools_version += 1
        self._version += 1
        self.num_changes += 1

    def _pool_gaps_locked(self, stats: GapStats | None) -> None:
        if stats is not None and stats.num_gaps > 0:
            pool = self.durations.by_symbol.setdefault(OTHER_TOOL_SYMBOL, GapStats())
            pool.num_gaps += stats.num_gaps
            pool.sum_log += stats.sum_log
            pool.sum_log_sq += stats.sum_log_sq
