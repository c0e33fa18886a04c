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
