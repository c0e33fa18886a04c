"""A refit running when its worker closes is stopped after its EM iteration, its result
dropped (QA192 F1; test_refit_worker_exit.py shows the process exit it protects).

Known failure: `RefitWorker.close` waited 1 s for the running refit and left it running on
a daemon thread, inside hmmlearn's C++ EM when the interpreter ended it (exit status 134).
"""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from agents_trace.predict.config import PredictorConfig
from agents_trace.predict.fit_stop import FitStop, FitStopped, stoppable_by
from agents_trace.predict.hmm import HmmSpec, initial_params, run_em
from agents_trace.predict.predictor import Predictor
from agents_trace.predict.refit_worker import RefitWorker
from tests.agents_trace.predict.synthetic import agent_sessions


def _long_sequences() -> tuple[list[list[int]], object]:
    rng = np.random.default_rng(1)
    seqs = [list(rng.integers(0, 20, size=50)) for _ in range(1000)]
    return seqs, initial_params(HmmSpec(12, False, 0), seqs, 20)


def test_close_stops_a_running_fit_after_its_em_iteration() -> None:
    """The job gives up with FitStopped (counted as stopped, not failed, nothing logged
    as an error) and the thread is gone when close returns, well within its bound."""
    seqs, params = _long_sequences()
    worker = RefitWorker()
    started = threading.Event()
    finished: list[bool] = []

    def job() -> None:
        started.set()
        run_em(params, seqs, 100000)
        finished.append(True)

    assert worker.request("tenant:a", job)
    assert started.wait(10.0)
    time.sleep(0.1)
    began = time.monotonic()
    worker.close(timeout_s=5.0)
    assert time.monotonic() - began < 2.0
    assert worker.wait_idle(0.0) and finished == []
    assert (worker.num_done, worker.num_stopped, worker.num_failed) == (1, 1, 0)
    assert not worker.request("tenant:a", job)


def test_a_requested_stop_refuses_em_at_its_door_and_an_unrequested_one_changes_nothing() -> None:
    seqs, params = _long_sequences()
    seqs = seqs[:50]
    plain = run_em(params, seqs, 3)
    with stoppable_by(FitStop()):   # a stop never requested: the very same fit
        watched = run_em(params, seqs, 3)
    for a, b in ((plain.start, watched.start), (plain.trans, watched.trans), (plain.emit, watched.emit)):
        np.testing.assert_array_equal(a, b)
    stop = FitStop()
    stop.request()
    with stoppable_by(stop), pytest.raises(FitStopped):
        run_em(params, seqs, 3)
    assert stop.wait_native_idle(0.0)
    assert run_em(params, seqs, 0) is params   # no EM asked: nothing to stop


def test_a_stop_reaches_only_the_thread_it_was_set_on() -> None:
    """A synchronous refit on another thread (tools, tests) is never stopped by a worker's stop."""
    seqs, params = _long_sequences()
    stop = FitStop()
    stop.request()
    out: list[object] = []
    with stoppable_by(stop):
        thread = threading.Thread(target=lambda: out.append(run_em(params, seqs[:20], 2)))
        thread.start()
        thread.join(30.0)
    assert len(out) == 1 and not isinstance(out[0], Exception)


def test_a_stopped_refit_keeps_the_tenant_model_it_had() -> None:
    predictor = Predictor(PredictorConfig(background_refits=False, min_sessions=5))
    before = predictor.fit_sequences("a", agent_sessions(40))
    assert before is not None
    stop = FitStop()
    stop.request()
    with stoppable_by(stop), pytest.raises(FitStopped):
        predictor.refit("a")
    assert predictor.model_of("a") is before
    predictor.close()
