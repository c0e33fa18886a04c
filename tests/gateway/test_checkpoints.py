"""Checkpoints save now and then on their own thread, and once more when stopped."""
from __future__ import annotations

import threading
import time

import pytest

from gateway.checkpoints import Checkpoints


def wait_for(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_saves_tick_until_stopped_then_one_final_save() -> None:
    threads: list[str] = []
    checkpoints = Checkpoints(lambda: threads.append(threading.current_thread().name), 0.02).start()
    assert wait_for(lambda: checkpoints.num_saved >= 3)
    assert set(threads) == {"stepahead-checkpoints"}   # off the caller's thread
    assert checkpoints.stop() is True
    count = len(threads)
    assert threads[-1] == threading.current_thread().name and checkpoints.num_saved == count
    time.sleep(0.1)
    assert len(threads) == count   # no tick after stop


def test_a_failing_save_is_counted_and_the_next_tick_tries_again() -> None:
    outcomes = iter([RuntimeError("disk full"), None, None, None, None, None, None, None])

    def save() -> None:
        failure = next(outcomes, None)
        if failure is not None:
            raise failure

    checkpoints = Checkpoints(save, 0.02).start()
    assert wait_for(lambda: checkpoints.num_saved >= 1)
    checkpoints.stop()
    assert checkpoints.num_failed == 1


def test_stop_without_start_still_saves_and_a_silly_interval_is_refused() -> None:
    saved = []
    assert Checkpoints(lambda: saved.append(1), 60.0).stop() is True and saved == [1]
    for every_s in (0.0, -1.0):
        with pytest.raises(ValueError):
            Checkpoints(lambda: None, every_s)


def test_a_save_the_disk_refuses_is_one_warning_line_said_once_until_a_save_works(caplog) -> None:
    failures = iter([FileNotFoundError(2, "No such file or directory", "/proc/x")] * 2 + [None]
                    + [PermissionError(13, "Permission denied", "/ro")])

    def save() -> None:
        failure = next(failures, None)
        if failure is not None:
            try:
                raise OSError("while making the directory") from failure   # chained, as mkdir's are
            except OSError:
                raise failure from None

    checkpoints = Checkpoints(save, 60.0, what="the tenants' spent tokens")
    with caplog.at_level("WARNING", logger="stepahead.gateway"):
        assert [checkpoints.save_now() for _ in range(4)] == [False, False, True, False]
    assert [(record.getMessage(), record.exc_info) for record in caplog.records] == [
        ("stepahead: warning: could not save the tenants' spent tokens: FileNotFoundError: [Errno 2] "
         "No such file or directory: '/proc/x'", None),   # said once, no traceback
        ("stepahead: warning: could not save the tenants' spent tokens: PermissionError: [Errno 13] "
         "Permission denied: '/ro'", None)]
    assert checkpoints.num_failed == 3 and checkpoints.num_saved == 1


def test_a_save_that_fails_for_a_bug_keeps_its_traceback(caplog) -> None:
    def save() -> None:
        raise KeyError("tenant")

    with caplog.at_level("ERROR", logger="stepahead.gateway"):
        assert Checkpoints(save, 60.0).save_now() is False
    [record] = caplog.records
    assert record.exc_info is not None and "could not checkpoint the forecasters' state" in record.getMessage()
