"""Repeated failures: the first of a kind logged (an expected kind in one line, any
other with its traceback), the rest counted."""
from __future__ import annotations

import logging

from cache.repeated_failures import RepeatedFailures


def test_one_line_per_kind_per_interval_and_none_lost(caplog):
    now = [0.0]
    failures = RepeatedFailures(logging.getLogger("stepahead.test"), interval_s=60.0, clock=lambda: now[0])

    def fail(kind: str, at_s: float) -> None:
        now[0] = at_s
        try:
            raise OSError(28, "No space left on device")
        except OSError:
            failures.log(kind, "%s the trace store failed", kind)

    with caplog.at_level(logging.ERROR, logger="stepahead.test"):
        for at_s in (0.0, 1.0, 2.0, 59.9):
            fail("writing", at_s)
        fail("reading", 30.0)   # another kind: its own first line
        fail("writing", 60.0)
        fail("writing", 61.0)
        fail("writing", 200.0)
    lines = [(record.getMessage(), record.exc_info is not None) for record in caplog.records]
    assert lines == [
        ("writing the trace store failed", True),
        ("reading the trace store failed", True),
        ("writing the trace store failed (also 3 more time(s) since the last report, not logged)", True),
        ("writing the trace store failed (also 1 more time(s) since the last report, not logged)", True),
    ]
    assert caplog.records[1].exc_info[1].strerror == "No space left on device"


def test_an_expected_failure_is_one_line_with_its_reason_and_a_bug_keeps_its_traceback(caplog):
    import sqlite3

    failures = RepeatedFailures(logging.getLogger("stepahead.test"), expected=(sqlite3.Error, OSError))
    with caplog.at_level(logging.ERROR, logger="stepahead.test"):
        for kind, error in (("disk", sqlite3.OperationalError("database or disk is full")),
                            ("io", OSError(5, "Input/output\nerror")), ("bug", KeyError("x"))):
            try:
                raise error
            except Exception:
                failures.log(kind, "writing %d step(s) to the trace store failed", 3)
    assert [(record.getMessage(), record.exc_info is not None) for record in caplog.records] == [
        ("writing 3 step(s) to the trace store failed: OperationalError: database or disk is full", False),
        ("writing 3 step(s) to the trace store failed: OSError: [Errno 5] Input/output error", False),
        ("writing 3 step(s) to the trace store failed", True)]


def test_warn_is_one_warning_line_without_a_traceback_counted_as_log_counts(caplog):
    now = [0.0]
    failures = RepeatedFailures(logging.getLogger("stepahead.test"), interval_s=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="stepahead.test"):
        for at_s in (0.0, 10.0, 20.0, 60.0):
            now[0] = at_s
            failures.warn("429", "model %s: %s", "m", "slow down")
    assert [(r.levelno, r.getMessage(), r.exc_info) for r in caplog.records] == [
        (logging.WARNING, "model m: slow down", None),
        (logging.WARNING, "model m: slow down (also 2 more time(s) since the last report, not logged)", None)]
