"""Forecasting's start and stop in a gateway: where the forecasters persist, what they
resume from there, the directory's claim and the checkpoints that save them
(the relay itself: gateway/forecasting.py).

Invariant: a started relay holds a `DirectoryClaim` on its directory until it is stopped
(none when the directory cannot be made or written: a warning, and the gateway serves);
when another gateway holds it already, the operator is told at the start (both still
save: the last to save a tenant wins), and the relay tries the claim again before each
checkpoint: it takes it once the other gateway is gone (which is then told at its own
start), and tells again when another process holds it by then (QA133: once the holder
restarted, neither log said two gateways shared the directory). A start that holds
the claim removes the partial files of saves a killed gateway cut short
(`cache.atomic_file.sweep_partial_files`), before its own saves begin.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from agents_trace.config import data_file
from cache.atomic_file import sweep_partial_files
from gateway.checkpoints import Checkpoints
from gateway.directory_claim import DirectoryClaim, claim_directory
from gateway.forecasting import GAPS_DIR, ForecastRelay
from gateway.stderr_line import stderr_line
from shards.transformers_names import LIBRARY_IMPORTS

log = logging.getLogger("stepahead.gateway")

PREDICTOR_DIR_ENV = "STEPAHEAD_PREDICTOR_DIR"
CHECKPOINT_EVERY_S = 300.0


def predictor_dir() -> Path:
    """Where per-tenant models persist: $STEPAHEAD_PREDICTOR_DIR (`~` expanded, as in the
    other STEPAHEAD_* paths), else `predictor` in the user data dir."""
    return data_file(os.environ.get(PREDICTOR_DIR_ENV), "predictor")


def start_forecasting(tracer, backends: Mapping[str, object],
                      checkpoint_every_s: float = CHECKPOINT_EVERY_S) -> ForecastRelay | None:
    """Build the predictor and the gap forecaster (both restored from disk), subscribe a
    relay to the tracer and start its checkpoints; None when there is no tracer or no
    local engine to serve."""
    engines = {name: b.engine for name, b in backends.items()
               if hasattr(getattr(b, "engine", None), "apply_forecast")}
    if tracer is None or not engines:
        return None
    with LIBRARY_IMPORTS:   # SciPy (and hmmlearn's scikit-learn, in the refits): never beside a torch import (QA208 F1)
        from agents_trace.predict.predictor import Predictor

    directory = predictor_dir()
    try:
        predictor = Predictor.restored(directory, fit_imports=LIBRARY_IMPORTS)   # (an empty one where none was saved)
    except Exception:
        log.exception("could not restore the predictor from %s; starting cold", directory)
        predictor = Predictor(fit_imports=LIBRARY_IMPORTS)
    relay = ForecastRelay(predictor, engines)
    try:
        relay.restore_gaps(directory)
    except Exception:
        log.exception("could not restore the gap forecaster from %s; starting it cold", directory)
    tracer.subscribe(relay)
    tracer.set_forecaster(relay.forecaster)
    try:
        relay.claim = claim_directory(directory)
    except OSError as exc:   # a directory it cannot write: its saves will say so too; it still serves
        log.warning("stepahead: warning: could not claim %s for this gateway's forecasts: %s", directory, exc)
    if relay.claim is not None and relay.claim.held:
        sweep_saves_cut_short(directory)
    relay.checkpoints = Checkpoints(lambda: checkpoint(relay, directory), checkpoint_every_s).start()
    stderr_line(f"stepahead: {started_line(relay, directory, claimed=relay.claim is not None)}")
    if relay.claim is not None and not relay.claim.held:
        stderr_line(f"stepahead: warning: {shared_directory_line(relay.claim)}")
    return relay


def sweep_saves_cut_short(directory: Path) -> int:
    """Remove the partial files a gateway killed mid-save left in `directory` and its
    `GAPS_DIR` (call while holding the directory's claim, before this gateway's saves
    begin), with one warning line when there were any; how many."""
    removed = 0
    for place in (directory, directory / GAPS_DIR):
        try:
            removed += sweep_partial_files(place)
        except OSError as exc:   # not readable: left as they are
            log.warning("stepahead: warning: could not look for the partial files of forecast saves cut short in "
                        "%s: %s", place, exc)
    if removed:
        log.warning("stepahead: warning: removed %d partial file(s) of forecast saves cut short (a gateway was killed "
                    "while saving) from %s", removed, directory)
    return removed


def checkpoint(relay: ForecastRelay, directory: Path) -> None:
    """Save the forecasters, after trying the directory's claim again when another gateway
    held it (see the module's invariant)."""
    claim = relay.claim
    if claim is not None and not claim.held:
        try:
            again = claim_directory(directory)
        except OSError:   # the save says why
            again = claim
        relay.claim = again
        if not again.held and again.holder_pid != claim.holder_pid:
            stderr_line(f"stepahead: warning: {shared_directory_line(again)}")
    relay.save(directory)


def started_line(relay: ForecastRelay, directory: Path, claimed: bool = True) -> str:
    """What the operator is told at start: what the forecasters resumed, and where they save
    (`claimed` False: the directory could not be made or written, so nothing is saved
    until it can be; the saves are still tried)."""
    tenants = relay.tenants()
    num_fitted = sum(relay.predictor.model_of(tenant) is not None for tenant in tenants)
    every = f"every {relay.checkpoints.every_s:g} s and " if relay.checkpoints is not None else ""
    resumed = (f"resumed {len(tenants)} tenant(s), {num_fitted} with a fitted step model," if tenants
               else "starting cold,")
    if not claimed:
        return f"forecasts: {resumed} not saving: {directory} cannot be written (tried again {every}at shutdown)"
    return f"forecasts: {resumed} saving to {directory} {every}at shutdown"


def shared_directory_line(claim: DirectoryClaim) -> str:
    """What the operator is told when another gateway saves its forecasts to the same
    directory: each save overwrites what the other learned of the same tenants."""
    who = f"another gateway (pid {claim.holder_pid})" if claim.holder_pid else "another gateway"
    return (f"{who} saves its forecasts to {claim.directory} too: each one's saves overwrite "
            f"what the other learned of the same tenants; give each gateway its own "
            f"{PREDICTOR_DIR_ENV}")


def stop_forecasting(relay: ForecastRelay | None) -> None:
    """Save both forecasters once more (the checkpoints' last save) and stop the predictor."""
    if relay is None:
        return
    if relay.checkpoints is not None:
        relay.checkpoints.stop()
    if relay.claim is not None:
        relay.claim.release()
    relay.predictor.close()
