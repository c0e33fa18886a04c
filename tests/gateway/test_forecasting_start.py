"""Forecasting's start and stop in a gateway (gateway/forecasting_start.py): resumed from
the last checkpoint, a damaged file set aside, and a directory claimed by one gateway."""
from __future__ import annotations

import json
import os
import time

from tests.gateway.test_forecasting import RecordingEngine, feed_two_answer_sessions, make_step


class _Tracer:
    """What start_forecasting needs of a tracer."""

    def __init__(self) -> None:
        self.subscribers = []
        self.forecaster = None

    def subscribe(self, subscriber) -> None:
        self.subscribers.append(subscriber)

    def set_forecaster(self, forecaster) -> None:
        self.forecaster = forecaster


def test_a_restarted_gateway_resumes_the_gap_forecasts_from_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    """Learning is checkpointed while the gateway runs: a gateway killed without its
    shutdown save restarts from the last checkpoint, and its gap forecaster is confident
    for the tenant at once (a cold one needs 20 resolved waits first)."""
    from types import SimpleNamespace

    from agents_trace.predict.predictor import Predictor
    from gateway.forecasting import GAPS_DIR, ForecastRelay
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting

    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    backends = {"m": SimpleNamespace(engine=RecordingEngine("predictive"))}
    first = start_forecasting(_Tracer(), backends, checkpoint_every_s=0.05)
    assert f"stepahead: forecasts: starting cold, saving to {tmp_path} every 0.05 s" in capsys.readouterr().err
    feed_two_answer_sessions(first, range(25))
    saved = first.checkpoints.num_saved
    deadline = time.monotonic() + 10
    while first.checkpoints.num_saved < saved + 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert first.checkpoints.num_saved >= saved + 2 and (tmp_path / GAPS_DIR / "_global.json").exists()
    # `first` is not stopped: as if killed after its last checkpoint
    tracer = _Tracer()
    second = start_forecasting(tracer, backends, checkpoint_every_s=60.0)
    err = capsys.readouterr().err
    assert "forecasts: resumed 1 tenant(s), 0 with a fitted step model, saving to" in err
    # `first` still holds the directory (a killed one would not): the operator is told
    assert (f"stepahead: warning: another gateway (pid {os.getpid()}) saves its forecasts to {tmp_path} "
            "too: each one's saves overwrite what the other learned of the same tenants; give each "
            "gateway its own STEPAHEAD_PREDICTOR_DIR") in err
    assert tracer.subscribers == [second] and tracer.forecaster == second.forecaster
    step = make_step("new", 0, 300.0, 301.0)
    for relay in (first, second):
        relay(step)
    resumed = second.gaps.forecast("t", "new", 301.0)
    assert resumed.confident and resumed == first.gaps.forecast("t", "new", 301.0)
    with Predictor() as predictor:
        cold = ForecastRelay(predictor, {"m": backends["m"].engine})
        cold(step)
        assert not cold.gaps.forecast("t", "new", 301.0).confident
    stop_forecasting(first)
    stop_forecasting(second)
    assert second.checkpoints.num_saved == 1   # its final save
    third = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)   # the directory is free again
    assert third.claim.held and "warning" not in capsys.readouterr().err
    stop_forecasting(third)


def test_an_unreadable_gaps_file_starts_the_gap_forecaster_cold(tmp_path, monkeypatch, caplog):
    from types import SimpleNamespace

    from gateway.forecasting import GAPS_DIR, LEGACY_GAPS_FILE
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting

    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    (tmp_path / LEGACY_GAPS_FILE).write_text("{truncated")
    relay = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))})
    assert relay is not None and relay.gaps.learned().gaps == {}
    assert "could not restore the gap forecaster" in caplog.text
    stop_forecasting(relay)   # and the next start finds good files again
    assert json.loads((tmp_path / GAPS_DIR / "_global.json").read_text())["format"] == "stepahead-gaps/1"
    assert not (tmp_path / LEGACY_GAPS_FILE).exists()


def test_a_predictor_directory_that_cannot_be_made_is_a_warning_not_a_failed_start(tmp_path, monkeypatch, caplog):
    from types import SimpleNamespace

    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting

    (tmp_path / "a-file").write_text("not a directory")
    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path / "a-file" / "predictor"))
    relay = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))},
                              checkpoint_every_s=60.0)
    assert relay is not None and relay.claim is None
    assert "could not claim" in caplog.text and "a-file" in caplog.text
    stop_forecasting(relay)   # its last save fails with a logged error, not a crash


def test_a_directory_it_cannot_claim_is_a_warning_line_and_the_start_line_does_not_promise_saves(
        tmp_path, monkeypatch, caplog, capsys):
    """The warning lacked the `stepahead: warning:` prefix, and the next line said it would
    save to the directory it had just said it could not claim."""
    from types import SimpleNamespace

    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting

    (tmp_path / "a-file").write_text("not a directory")
    directory = tmp_path / "a-file" / "predictor"
    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(directory))
    relay = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))},
                              checkpoint_every_s=60.0)
    try:
        [claim] = [message for message in caplog.messages if "could not claim" in message]
        assert claim.startswith(f"stepahead: warning: could not claim {directory} for this gateway's forecasts: ")
        [started] = [line for line in capsys.readouterr().err.splitlines() if "forecasts:" in line]
        assert started == (f"stepahead: forecasts: starting cold, not saving: {directory} cannot be written "
                           "(tried again every 60 s and at shutdown)")
    finally:
        stop_forecasting(relay)


def test_a_tilde_in_the_predictor_directory_means_the_home_directory(tmp_path, monkeypatch):
    """As in every other STEPAHEAD_* path: a directory named `~` appeared in the working
    directory."""
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, predictor_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(PREDICTOR_DIR_ENV, "~/sa-pred")
    assert predictor_dir() == tmp_path / "sa-pred"
    monkeypatch.delenv(PREDICTOR_DIR_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert predictor_dir() == tmp_path / "data" / "stepahead" / "predictor"


def test_a_start_over_damaged_files_it_cannot_set_aside_resumes_every_other_tenant(tmp_path, monkeypatch, caplog,
                                                                                  capsys):
    """A read-only predictor directory with a damaged tenant file and a global gaps file
    made a directory: each is one warning line (no traceback), only what it held starts
    anew, and no save writes over either."""
    from types import SimpleNamespace

    from agents_trace.predict.persist import tenant_stem
    from agents_trace.predict.predictor import Predictor
    from cache import damaged_files
    from cache.gap_files import GLOBAL_FILE
    from gateway.forecasting import GAPS_DIR, ForecastRelay
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting
    from tests.agents_trace.predict.synthetic import agent_sessions

    with Predictor() as predictor:
        predictor.fit_sequences("alpha", agent_sessions(12))
        predictor.fit_sequences("beta", agent_sessions(12, seed=1))
        relay = ForecastRelay(predictor, {})
        for tenant in ("alpha", "beta"):
            feed_two_answer_sessions(relay, range(12), tenant=tenant)
        relay.save(tmp_path)
        resolved = relay.gaps.num_resolved("alpha")
    beta = tmp_path / f"{tenant_stem('beta')}.json"
    beta.write_text(beta.read_text()[:50])
    (tmp_path / GAPS_DIR / GLOBAL_FILE).unlink()
    (tmp_path / GAPS_DIR / GLOBAL_FILE).mkdir()

    def refuse(source, target):
        raise PermissionError(1, "Operation not permitted", str(source), None, str(target))

    monkeypatch.setattr(damaged_files, "os", SimpleNamespace(replace=refuse))
    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    started = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))},
                                checkpoint_every_s=60.0)
    assert "forecasts: resumed 2 tenant(s), 1 with a fitted step model" in capsys.readouterr().err
    assert started.predictor.model_of("alpha") is not None and started.gaps.num_resolved("alpha") == resolved
    assert started.gaps.num_resolved("beta") > 0   # its gap file was fine
    assert not any(record.exc_info for record in caplog.records)
    left = [r.getMessage() for r in caplog.records if "could not be set aside either" in r.getMessage()]
    assert len(left) == 2 and any(str(beta) in m for m in left)
    started(make_step("new", 0, 500.0, 501.0))
    stop_forecasting(started)
    assert started.checkpoints.num_failed == 0
    assert len(beta.read_text()) == 50 and (tmp_path / GAPS_DIR / GLOBAL_FILE).is_dir()


def test_a_gateway_that_found_the_directory_claimed_takes_it_once_the_other_is_gone(tmp_path, monkeypatch, capsys):
    """QA133 M2: the second gateway warned at its start, but once the first (the holder)
    restarted it took the freed claim silently, and neither log said two gateways shared the
    directory. The one without the claim tries it again at each checkpoint: it takes it once
    the holder is gone (so the holder, restarting, is told), and tells again when a new
    process holds it."""
    from types import SimpleNamespace

    from gateway.forecasting_start import PREDICTOR_DIR_ENV, checkpoint, start_forecasting, stop_forecasting

    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    backends = {"m": SimpleNamespace(engine=RecordingEngine("predictive"))}
    first = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)
    second = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)
    assert not second.claim.held and "warning: another gateway" in capsys.readouterr().err
    second.claim.holder_pid = -1   # as if the holder had been a process that restarted since
    checkpoint(second, tmp_path)
    assert not second.claim.held and "warning: another gateway" in capsys.readouterr().err   # told again
    checkpoint(second, tmp_path)
    assert "warning" not in capsys.readouterr().err   # the same holder: once is enough
    stop_forecasting(first)   # the holder stops (or restarts)
    checkpoint(second, tmp_path)
    assert second.claim.held
    restarted = start_forecasting(_Tracer(), backends, checkpoint_every_s=60.0)
    assert not restarted.claim.held and "warning: another gateway" in capsys.readouterr().err
    stop_forecasting(restarted)
    stop_forecasting(second)


def test_the_forecasters_import_takes_the_lock_of_every_library_import(tmp_path, monkeypatch):
    """QA208 F1: SciPy, imported for hmmlearn as the forecasters start, read a torch an
    embedding model's thread was still importing and failed the start; the forecasters'
    import takes the lock every off-thread import of transformers (and so torch) takes."""
    import sys
    from types import ModuleType, SimpleNamespace

    from agents_trace.predict import predictor
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting
    from shards.transformers_names import LIBRARY_IMPORTS
    locked_while_imported = []

    class Watched(ModuleType):
        def __getattr__(self, name: str):
            locked_while_imported.append(LIBRARY_IMPORTS.locked())
            return getattr(predictor, name)
    monkeypatch.setitem(sys.modules, predictor.__name__, Watched(predictor.__name__))
    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    relay = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))})
    stop_forecasting(relay)
    assert relay is not None and locked_while_imported and all(locked_while_imported)
    assert not LIBRARY_IMPORTS.locked()


def test_the_refits_import_hmmlearn_under_the_lock_before_their_first_job(tmp_path, monkeypatch):
    """hmmlearn (scikit-learn, SciPy's statistics) is no longer imported as the forecasters
    start; the background refits import it before their first job, under the same lock."""
    from types import SimpleNamespace

    from agents_trace.predict import hmm
    from gateway.forecasting_start import PREDICTOR_DIR_ENV, start_forecasting, stop_forecasting
    from shards.transformers_names import LIBRARY_IMPORTS
    locked_while_imported = []

    def watched() -> tuple[type, type]:
        locked_while_imported.append(LIBRARY_IMPORTS.locked())
        return hmm_classes()
    hmm_classes = hmm.hmmlearn_classes
    monkeypatch.setattr(hmm, "hmmlearn_classes", watched)
    monkeypatch.setenv(PREDICTOR_DIR_ENV, str(tmp_path))
    relay = start_forecasting(_Tracer(), {"m": SimpleNamespace(engine=RecordingEngine("predictive"))})
    assert relay is not None and locked_while_imported == []
    ran = []
    relay.predictor._worker.request("probe", lambda: ran.append(LIBRARY_IMPORTS.locked()))
    assert relay.predictor._worker.wait_idle(timeout_s=60)
    stop_forecasting(relay)
    assert locked_while_imported == [True] and ran == [False]
