"""Background refit worker: dedupe, order, failure isolation."""
from __future__ import annotations

import threading

from agents_trace.predict.refit_worker import RefitWorker


def test_refit_worker_dedupes_queued_keys() -> None:
    worker = RefitWorker()
    gate = threading.Event()
    ran: list[str] = []
    assert worker.request("block", gate.wait)
    assert worker.request("a", lambda: ran.append("a1"))
    assert not worker.request("a", lambda: ran.append("a2"))
    assert worker.request("b", lambda: ran.append("b"))
    gate.set()
    assert worker.wait_idle(timeout_s=10.0)
    assert ran == ["a1", "b"]
    worker.close()


def test_refit_worker_survives_failing_job() -> None:
    worker = RefitWorker()
    ran: list[int] = []

    def boom() -> None:
        raise RuntimeError("fit failed")

    worker.request("x", boom)
    worker.request("y", lambda: ran.append(1))
    assert worker.wait_idle(timeout_s=10.0)
    assert ran == [1] and worker.num_failed == 1
    worker.close()
    assert not worker.request("z", lambda: None)
