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


def _spin_in_child(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_of_a_process_that_is_neither_gateway_nor_worker_counts_as_others():
    import multiprocessing
    before = CpuSample.take([])
    child = multiprocessing.get_context("spawn").Process(target=_spin_in_child, args=(0.5,))
    child.start()
    child.join(30)
    out = delta(before, CpuSample.take([]))
    assert child.exitcode == 0
    assert out["others_s"] >= 0.4  # the child's spin, not named as a worker
    assert out["steal_s"] >= 0.0
    assert before.machine_busy_s > 0  # read from /proc/stat
