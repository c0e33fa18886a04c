"""The per-tenant step predictor: observe steps, forecast the next one and the return.

Hot path (`observe`, `forecast`, `end_session`): no fitting, no I/O, no logging; each
call takes one tenant's lock for a few O(K^2 + V) numpy operations. Fits run in
`refit` (synchronous, for tools and tests) or on the background `RefitWorker`, which a
tenant triggers when it is due (config.py: after a number of new sessions that grows
with the tenant, at most `refit_every_sessions`; first as soon as it has
`min_sessions`); the fitted model is swapped in by reference, so a concurrent
forecast sees either the old model or the new one, never a mix.

Forecast semantics: `next_step` is the distribution of the session's next step (with
`END`), conditioned on the time already waited; `p_end` is the probability that the
session sends no further request (END, or a text answer followed by END);
`p_return_within` and `eta_quantiles_s` come from returns.py. After a response that asked
for tools (`mark_waiting`), the next step is the first of them unless the session is
abandoned (pending_tools.py). `confident` is False while
the tenant is cold (global model) or, for a forecast not made while tools are pending,
its recent top-1 on real guesses (tenant.py says which steps are scored) is below
`min_top1` or the session's own last `session_max_misses` real guesses all missed (until
one of them hits); a forecast while tools are pending is confident once the tenant's model is
fitted or `min_tool_waits` of its tool waits have ended (it needs the tool's duration, not
the step model).
"""
from __future__ import annotations

import contextlib
import threading
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

from cache.forecast import END_SYMBOL, Forecast, tool_step

from .config import PredictorConfig
from .fit import fit_step_model
from .hmm import import_hmmlearn
from .predictor_files import PredictorFiles
from .refit_worker import RefitWorker
from .returns import forecast_returns, return_mixture
from .step_model import FitReport, StepModel, step_class
from .tenant import TenantState
from .turns import TurnCalibration, calibrate


def _single_threaded_blas() -> threadpool_limits:
    """Fits run with one BLAS thread. NOTE: OpenBLAS worker threads keep spinning for
    a while after each call; on a small machine that steals the cores the request path
    needs and turned forecasts right after a refit from ~50 us into milliseconds. The
    limit is process-wide while a fit runs, which is harmless here: the gateway process
    does no heavy linear algebra (model workers are separate processes)."""
    return threadpool_limits(limits=1, user_api="blas")


@dataclass(frozen=True, slots=True)
class TenantStatus:
    """What the viewer shows about a tenant's predictor."""

    tenant: str
    is_warm: bool
    num_learned: int
    num_live_sessions: int
    recent_top1: float | None     # None: no step scored yet
    recent_logloss: float | None
    fit: FitReport | None


class Predictor(PredictorFiles):
    """Per-tenant next-step and return forecasts for live agent sessions.

    Thread-safe: any number of threads may call the hot-path methods; tenants never
    block each other, sessions of one tenant serialise on its lock for microseconds.
    """

    def __init__(self, config: PredictorConfig | None = None,
                 fit_imports: contextlib.AbstractContextManager | None = None) -> None:
        """`fit_imports`: a lock held while the background refits import hmmlearn (before
        their first job); without it they import it unlocked, on their first fit."""
        self.config = config or PredictorConfig()
        self._tenants: dict[str, TenantState] = {}
        self._tenants_lock = threading.Lock()
        self._global_model: StepModel | None = None
        self._global_lock = threading.Lock()
        self._global_sessions: deque[tuple[str, ...]] = deque(
            maxlen=self.config.max_fit_sessions)
        self._global_learned = 0
        self._global_learned_at_fit = 0
        self._global_changes = 0   # grows with every change of what `save` writes of the global model
        # directory -> ("tenant", name) -> (state, its num_changes) or ("global",) -> changes, as written there
        self._written: dict[str, dict[tuple, object]] = {}
        self._worker = RefitWorker(cpu_share=self.config.refit_cpu_share,
                                   prepare=None if fit_imports is None else partial(import_hmmlearn, fit_imports))
        self._horizons_s = np.asarray(self.config.horizons_s, dtype=np.float64)
        self._quantiles = np.asarray(self.config.quantiles, dtype=np.float64)

    # -- tenants ----------------------------------------------------------------------
    def _tenant(self, tenant: str) -> TenantState:
        state = self._tenants.get(tenant)
        if state is None:
            with self._tenants_lock:
                state = self._tenants.get(tenant)
                if state is None:
                    state = TenantState(tenant, self.config)
                    self._tenants[tenant] = state
        return state

    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    def model_of(self, tenant: str) -> StepModel | None:
        """The tenant's own fitted model (None while cold)."""
        state = self._tenants.get(tenant)
        return None if state is None else state.model

    @property
    def global_model(self) -> StepModel | None:
        return self._global_model

    def status(self, tenant: str) -> TenantStatus | None:
        """The tenant's status; None for a tenant never seen (asking creates nothing)."""
        state = self._tenants.get(tenant)
        if state is None:
            return None
        with state.lock:
            model = state.model
            accuracy = state.accuracy
            scored = accuracy.weight > 0
            return TenantStatus(tenant, model is not None, state.num_learned,
                                len(state.sessions), accuracy.top1 if scored else None,
                                accuracy.logloss if scored else None, None if model is None else model.report)

    # -- hot path ---------------------------------------------------------------------
    def observe(self, tenant: str, session: str, symbol: str, t_s: float,
                gap_s: float | None = None) -> None:
        """A session took a step (a tool that ran, spelled `cache.forecast.tool_step(name)`,
        or `USER`, `ASSISTANT_TEXT`, `END`).

        gap_s: time from the previous response's end to this step's request (the
        step's duration), learned per (tenant, symbol). `END` also ends the session.
        """
        self._tenant(tenant).observe(session, symbol, t_s, gap_s, self._global_model)
        if symbol == END_SYMBOL:
            self.end_session(tenant, session)

    def mark_waiting(self, tenant: str, session: str, t_s: float,
                     tool_calls: Sequence[str] = ()) -> None:
        """The session's response finished at `t_s`: its wait for the next step starts
        here (default: the time of its last observed step). `tool_calls`: the names of
        the tools that response asked for, as the client spells them (this spells them as
        steps, `tool_step`); until the next step, forecasts say the first of them comes
        next unless the session is abandoned (pending_tools.py)."""
        self._tenant(tenant).mark_waiting(session, t_s, tuple(tool_step(name) for name in tool_calls))

    def end_session(self, tenant: str, session: str, *, learn: bool = True) -> None:
        """The session is over. With `learn` it becomes training data (recency memory at
        once, models at the next refit); without, it is dropped."""
        sequence = self._tenant(tenant).end_session(session, learn, self._global_model)
        if sequence is not None:
            self._after_learned(tenant, [sequence])

    def forecast(self, tenant: str, session: str, now_s: float) -> Forecast:
        """What `session` does next and when (an unknown session is forecast from the
        start state). No fitting and no I/O."""
        state = self._tenant(tenant)
        inputs = state.forecast_inputs(session, now_s, self._global_model)
        pred = inputs.prediction
        mixture = inputs.mixture
        tool = inputs.pending_tool
        slot = None
        if tool is not None and not pred.vocab.contains(tool):
            # The tool asked for is new to the tenant (or past its vocabulary's cap): its
            # mass sits in the bucket it encodes to (`<oov>` or `<other tool>`), which
            # returns after the tool's own learned duration once it has one (QA188 F1).
            slot = pred.vocab.encode_one(tool)
            with state.lock:
                table = state.durations.table_with(pred.vocab.symbols, slot, tool)
            if table is not mixture.table:
                mixture = return_mixture(pred.p1, pred.p2, pred.vocab.end_id, pred.silent_id,
                                         table, self._horizons_s, self._quantiles)
        returns = forecast_returns(pred.p1, pred.p2, pred.vocab.end_id, pred.silent_id,
                                   mixture, inputs.elapsed_s, self._horizons_s,
                                   self._quantiles)
        next_step = dict(zip(pred.vocab.symbols, returns.next_step.tolist()))
        if slot is not None:
            next_step[tool] = next_step.pop(pred.vocab.symbols[slot])
        return Forecast(tenant=tenant, session=session, made_at_s=now_s,
                        next_step=next_step,
                        p_end=returns.p_end, p_return_within=returns.p_return_within,
                        eta_quantiles_s=returns.eta_quantiles_s, confident=inputs.confident)

    # -- learning and fitting -----------------------------------------------------------
    def _after_learned(self, tenant: str, sequences: Sequence[tuple[str, ...]]) -> None:
        with self._global_lock:
            for seq in sequences:
                self._global_sessions.append(tuple(step_class(s) for s in seq))
            self._global_learned += len(sequences)
            self._global_changes += 1
            global_due = self._due(self._global_learned, self._global_learned_at_fit,
                                   self._global_model is not None,
                                   self.config.global_refit_every_sessions)
        if not self.config.background_refits:
            return
        if self.refit_due(tenant):
            self.request_refit(tenant)
        if global_due:
            self._worker.request("global", self.refit_global)

    def refit_due(self, tenant: str) -> bool:
        """Whether the tenant has learned enough new sessions to refit (config rule)."""
        state = self._tenant(tenant)
        return self._due(state.num_learned, state.num_learned_at_fit,
                         state.model is not None, self.config.refit_every_sessions)

    def refit_if_due(self, tenant: str) -> None:
        """Refit `tenant` and then the global class model now, each only if due
        (synchronous: for replays without the background worker, so that a tenant learns
        as a served one does)."""
        if self.refit_due(tenant):
            self.refit(tenant)
        with self._global_lock:
            global_due = self._due(self._global_learned, self._global_learned_at_fit,
                                   self._global_model is not None, self.config.global_refit_every_sessions)
        if global_due:
            self.refit_global()

    def request_refit(self, tenant: str) -> bool:
        """Queue a background refit of `tenant` (never blocks); False if one is already
        queued."""
        return self._worker.request(f"tenant:{tenant}", lambda: self.refit(tenant))

    def _due(self, num_learned: int, at_fit: int, is_fitted: bool, every: int) -> bool:
        if num_learned < self.config.min_sessions:
            return False
        if not is_fitted:
            return True
        wanted = max(self.config.min_sessions, self.config.refit_growth * at_fit)
        return num_learned - at_fit >= min(every, wanted)

    def refit(self, tenant: str) -> StepModel | None:
        """Fit the tenant's model now from its learned sessions and swap it in; None
        (and the tenant stays cold) with fewer than `min_sessions`."""
        state = self._tenant(tenant)
        sessions, num_learned = state.snapshot()
        if len(sessions) < self.config.min_sessions:
            return None
        with _single_threaded_blas():
            model = fit_step_model(sessions, self.config.fit)
            turns = self._calibrate_turns(model, sessions)
        state.install(model, num_learned, self._global_model, turns)
        return model

    def _calibrate_turns(self, model: StepModel, sessions: Sequence[Sequence[str]]) -> TurnCalibration:
        config = self.config
        if config.turn_odds_cap == 0:
            return TurnCalibration()
        return calibrate(model, sessions, config.silent_symbols, config.turn_odds_cap, config.turn_odds_strength)

    def refit_global(self) -> StepModel | None:
        """Fit the global class model from all tenants' learned sessions."""
        with self._global_lock:
            sessions = list(self._global_sessions)
            num_learned = self._global_learned
        if len(sessions) < self.config.min_sessions:
            return None
        with _single_threaded_blas():
            model = fit_step_model(sessions, self.config.fit, abstract=True)
        with self._global_lock:
            self._global_model = model
            self._global_learned_at_fit = num_learned
            self._global_changes += 1
        return model

    def fit_sequences(self, tenant: str, sequences: Sequence[Sequence[str]],
                      gaps: Sequence[Sequence[float | None]] | None = None, *,
                      remember: bool = True) -> StepModel | None:
        """Learn finished sessions given as symbol lists (END appended where missing;
        `gaps[i][j]` is the gap of step j of session i, or None) and refit synchronously.

        remember=False keeps them out of the recency memory (for replays that feed the
        memory themselves in arrival order, see `remember`).
        """
        learned = self._tenant(tenant).learn_sequences(sequences, gaps, remember)
        with self._global_lock:
            self._global_sessions.extend(tuple(step_class(s) for s in seq) for seq in learned)
            self._global_learned += len(learned)
            self._global_changes += 1
        return self.refit(tenant)

    def remember(self, tenant: str, sequence: Sequence[str]) -> None:
        """Add a finished session to the recency memory only (no refit data)."""
        self._tenant(tenant).remember(sequence, self._global_model)

    def wait_for_refits(self, timeout_s: float | None = None) -> bool:
        return self._worker.wait_idle(timeout_s)

    def close(self) -> None:
        self._worker.close()

    def __enter__(self) -> "Predictor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
