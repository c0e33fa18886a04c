"""Forecasts from finished agent steps to the KV caches of the local workers.

The tracer's writer thread hands every finished `Step` and `SessionEnded` to a
`ForecastRelay`, which feeds the predictor (`observe`), asks it at once for the session's
forecast — the moment a response ends is when the cache must decide to pin, demote or
prefetch — and hands the forecast to the local engine that served the step; the engine
routes it to the worker holding the session. Nothing here runs on the request path.
The same forecast is what the tracer checks the session's next step against
(`ForecastRelay.forecaster`): one forecast per finished step, not two. Where the predictor
is not confident (a tenant whose model is not fitted yet: that needs 8 of its sessions
ended, and a session ends only after `session_idle_timeout_s` idle), the relay sends the
forecast of a gap forecaster (`cache.gap_forecaster`, the simulator's built-in source, fed
every successful step) when that one is confident: it learns each tenant's return gaps
and odds from arrival times within minutes. Both keep what they learned across restarts
(`gateway.forecasting_start.predictor_dir()`: the predictor's files and `GAPS_DIR`, a
file per tenant), saved at shutdown and every `CHECKPOINT_EVERY_S`
(`gateway.checkpoints`, started by `gateway.forecasting_start`), each tenant only when it
changed, so a killed gateway loses minutes of learning at most. An engine running
one of the anchors (`cache.policies.TOLD_TOOL_CALLS`: the Continuum- and KVFlow-style
policies) gets instead what those systems are told, as the simulator gives it to them: the
tool the response asked for and that tool's past waits in the tenant (`ToolCallSource`).

Invariant: below the gateway, session keys are namespaced by tenant
(`gateway.engine_sessions.engine_session_key`), both in WorkItems and in forecasts, so equal client session ids
of two tenants never share router affinity, pins or prefetches.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from agents_trace.records import SessionEnded, Step, StepContext
from agents_trace.symbols import predictor_subscriber
from cache.forecast import END_SYMBOL, Forecast
from cache.forecast_source import RequestSeen, first_confident
from cache.gap_forecaster import GapForecaster
from cache.gap_files import GapFiles
from cache.gap_memory import read_gaps
from cache.policies import TOLD_TOOL_CALLS
from cache.tool_call_source import ToolCallSource
from gateway.checkpoints import Checkpoints
from gateway.directory_claim import DirectoryClaim
from gateway.engine_sessions import engine_session_key

log = logging.getLogger("stepahead.gateway")

GAPS_DIR = "_gaps"            # the gap forecaster's statistics, beside the predictor's files
LEGACY_GAPS_FILE = "_gaps.json"   # all of them in one file, as saved before GAPS_DIR; read once


def bind_session(prepared, trace: StepContext | None) -> None:
    """Give a local request the tracer's session (namespaced) so its blocks, routing and
    the session's forecasts all name the same session."""
    payload = prepared.payload
    if trace is None or not hasattr(payload, "session"):
        return
    payload.session = engine_session_key(prepared.tenant, trace.session)


class ForecastRelay:
    """A tracer subscriber: observe each event, then forward the session's forecast.

    Invariant: `_latest` holds at most one forecast per session, the one made for its
    last successful step, until the tracer's forecaster takes it (right after the
    subscribers, on the same writer thread) or the session ends. `tool_calls` and `gaps`
    see the same successful steps as the predictor and forget a session when it ends.
    `gaps` is touched only under `_gaps_lock` (the writer thread learns, a checkpoint copies
    the changed tenants: the lock is held in proportion to them, not to every tenant).
    """

    def __init__(self, predictor, engines: Mapping[str, object], clock: Callable[[], float] = time.time):
        self.predictor = predictor
        self.engines = dict(engines)
        self.clock = clock
        self._observe = predictor_subscriber(predictor, clock)
        self._latest: dict[tuple[str, str], object] = {}
        self.tool_calls = ToolCallSource()
        self.gaps = GapForecaster()
        self.num_forwarded = 0
        self.num_forecasts = 0
        self.num_gap_forecasts = 0   # forecasts sent from `gaps`, the predictor not confident
        self._gaps_lock = threading.Lock()
        self._gap_files: dict[str, GapFiles] = {}   # resolved directory -> what was written there
        self.checkpoints: Checkpoints | None = None
        self.claim: DirectoryClaim | None = None   # of the directory it saves to, when started

    def save(self, directory: str | Path) -> None:
        """Write what both forecasters learned under `directory` (from any thread; one
        save at a time), each tenant only if it changed since it was written there."""
        self.predictor.save(directory)
        files = self._files_in(directory)
        with self._gaps_lock:
            marks = self.gaps.change_marks()
        stale = files.stale(marks)   # a file check each: outside the lock
        with self._gaps_lock:
            learned = self.gaps.learned(stale)
        files.write(learned, {tenant: marks[tenant] for tenant in stale})
        (Path(directory) / LEGACY_GAPS_FILE).unlink(missing_ok=True)   # superseded by the files

    def restore_gaps(self, directory: str | Path) -> None:
        """Resume the gap forecaster from `directory`: its `GAPS_DIR`, else a
        `LEGACY_GAPS_FILE`, else nothing. A file in `GAPS_DIR` that cannot be used is set
        aside (`GapFiles.set_aside`, one warning line each) and only what it held starts
        anew: a tenant, or the all-tenant level of the global file (a prior); the others
        are adopted, and marked as written (the first save leaves them as they are)."""
        files = self._files_in(directory)
        legacy = Path(directory) / LEGACY_GAPS_FILE
        if files.exists():
            learned, unusable = files.read(self.gaps.return_features)
            files.set_aside(unusable)
        elif legacy.exists():
            learned = read_gaps(legacy)
        else:
            return
        with self._gaps_lock:
            self.gaps.adopt(learned)
            marks = self.gaps.change_marks()
        if files.exists():   # the files hold what was adopted: the first save skips them
            files.mark_written(marks)

    def _files_in(self, directory: str | Path) -> GapFiles:
        key = str(Path(directory).resolve())
        files = self._gap_files.get(key)
        if files is None:
            files = self._gap_files[key] = GapFiles(Path(directory) / GAPS_DIR)
        return files

    def tenants(self) -> list[str]:
        """Every tenant either forecaster has learned anything of."""
        with self._gaps_lock:
            gap_tenants = set(self.gaps.learned_tenants())
        return sorted(set(self.predictor.tenants()) | gap_tenants)

    def tenant_status(self, tenant: str) -> dict:
        """Where a tenant's forecasts stand, for the trace viewer: its step model (fitted
        on how many finished sessions, how its recent forecasts did) and its return gaps
        (how many waits resolved; confident from `min_outcomes`)."""
        predictor = self.predictor
        step_model = {"fitted": False, "sessions_learned": 0, "sessions_to_fit": predictor.config.min_sessions,
                      "live_sessions": 0, "recent_top1": None, "recent_log_loss": None, "fit": None}
        status = predictor.status(tenant)
        if status is not None:
            fit = status.fit
            step_model.update(
                fitted=status.is_warm, sessions_learned=status.num_learned, live_sessions=status.num_live_sessions,
                recent_top1=_rounded(status.recent_top1), recent_log_loss=_rounded(status.recent_logloss),
                fit=None if fit is None else {"sessions": fit.num_sessions, "states": fit.num_states,
                                              "val_top1": fit.val_top1, "val_log_loss": fit.val_logloss,
                                              "fit_s": fit.fit_s})
        with self._gaps_lock:
            resolved = self.gaps.num_resolved(tenant)
        needed = self.gaps.config.min_outcomes
        return {"tenant": tenant, "step_model": step_model,
                "return_gaps": {"resolved_waits": int(resolved), "waits_to_confident": needed,
                                "confident": resolved >= needed}}

    def series(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Its counts as metric series (gateway.metrics names them), for admins only:
        they mix every tenant's traffic."""
        out = {("stepahead_forecasts_total", (("source", "predictor"),)):
               float(self.num_forecasts - self.num_gap_forecasts),
               ("stepahead_forecasts_total", (("source", "gaps"),)): float(self.num_gap_forecasts),
               ("stepahead_forecasts_forwarded_total", ()): float(self.num_forwarded)}
        if self.checkpoints is not None:
            out[("stepahead_forecaster_checkpoints_total", (("outcome", "saved"),))] = float(self.checkpoints.num_saved)
            out[("stepahead_forecaster_checkpoints_total", (("outcome", "failed"),))] = float(self.checkpoints.num_failed)
        return out

    def _gap_forecast(self, tenant: str, session: str, now_s: float) -> Forecast | None:
        with self._gaps_lock:
            return self.gaps.forecast(tenant, session, now_s)

    def _forecast(self, tenant: str, session: str, now_s: float) -> Forecast:
        """The predictor's forecast where confident, else the gap forecaster's where that
        one is, else the predictor's."""
        forecast = self.predictor.forecast(tenant, session, now_s)
        chosen = first_confident(forecast, lambda: self._gap_forecast(tenant, session, now_s))
        self.num_gap_forecasts += chosen is not forecast
        return chosen

    def _block_size(self, model: str | None) -> int:
        engine = self.engines.get(model) if model is not None else None
        engine = engine if engine is not None else next(iter(self.engines.values()), None)
        return max(1, getattr(getattr(engine, "config", None), "block_size", 16))

    def forecaster(self, tenant: str, session: str, now_s: float):
        """The tracer's forecaster: the forecast this relay just made for the session's
        step, else a fresh one."""
        forecast = self._latest.pop((tenant, session), None)
        if forecast is not None:
            return forecast
        self.num_forecasts += 1
        return self._forecast(tenant, session, now_s)

    def __call__(self, event) -> None:
        self._observe(event)
        if not isinstance(event, (Step, SessionEnded)):
            return
        if isinstance(event, SessionEnded):
            self._latest.pop((event.tenant, event.session), None)
            self.tool_calls.forget(event.tenant, event.session)
            with self._gaps_lock:
                self.gaps.forget(event.tenant, event.session)
            if event.reason == "failed":   # its one step generated nothing (refused): no forecast was made
                return                     # or sent for it, and a refused flood sends the workers nothing
        elif event.error is not None:
            return
        else:
            names = tuple(call.name for call in event.tool_calls)
            self.tool_calls.observe_step(event.tenant, event.session, event.arrived_s, event.ended_s, names)
            seen = RequestSeen(event.tenant, event.session, event.arrived_s, event.after.label, names,
                               -(-event.num_input_tokens // self._block_size(event.model)))
            with self._gaps_lock:
                self.gaps.observe(seen)
        now_s = self.clock()
        if isinstance(event, Step):
            forecast = self._latest[(event.tenant, event.session)] = self._forecast(event.tenant, event.session, now_s)
        else:   # the session is over: the predictor's END, never a gap forecast
            forecast = self.predictor.forecast(event.tenant, event.session, now_s)
        self.num_forecasts += 1
        key = engine_session_key(event.tenant, event.session)
        model = getattr(event, "model", None)
        targets = [self.engines[model]] if model in self.engines else list(self.engines.values())
        told = self._told(event, now_s) if any(engine_policy(e) in TOLD_TOOL_CALLS for e in targets) else None
        for engine in targets:
            sent = told if engine_policy(engine) in TOLD_TOOL_CALLS else forecast
            if sent is None:
                continue
            try:
                engine.apply_forecast(dataclasses.replace(sent, session=key))
                self.num_forwarded += 1
            except Exception:  # a dead worker must not stop the tracer's thread
                log.exception("could not forward a forecast to the engine")

    def _told(self, event, now_s: float) -> Forecast | None:
        """What the anchors are told: the session's end as a fact (the gateway ended it),
        else the tool its response asked for and when that tool usually returns."""
        if isinstance(event, SessionEnded):
            return Forecast(event.tenant, event.session, now_s, next_step={END_SYMBOL: 1.0}, p_end=1.0,
                            confident=True)
        return self.tool_calls.forecast(event.tenant, event.session, now_s)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def engine_policy(engine) -> str | None:
    """The cache policy an engine's workers run, when it says."""
    return getattr(getattr(engine, "config", None), "policy", None)
