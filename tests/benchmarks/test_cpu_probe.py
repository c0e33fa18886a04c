from __future__ import annotations

import os
import threading
import time

from benchmarks.cpu_probe import CpuSample, delta


def _spin_then_wait(seconds: float, spun: threading.Event, release: threading.Event) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    spun.set()
    release.wait(10)


def test_delta_attributes_cpu_to_the_thread_that_spent_it():
    before = CpuSample.take([os.getpid()])
    spun, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=_spin_then_wait, args=(0.3, spun, release),
                              name="probe-spinner")
    thread.start()
    assert spun.wait(10)
    after = CpuSample.take([os.getpid()])  # while the thread is alive
    release.set()
    thread.join()
    out = delta(before, after)
    assert out["threads"]["probe-spinner"] >= 0.2
    assert out["gateway_process_s"] >= out["threads"]["probe-spinner"]
    assert out["workers_s"] >= 0.2  # this process, read as a "worker" pid


def test_missing_processes_are_skipped():
    assert CpuSample.take([2 ** 22 + 12345]).processes == {}
