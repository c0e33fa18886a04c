"""Recent-accuracy tracking."""
from __future__ import annotations

import pytest

from agents_trace.predict.accuracy import AccuracyTracker


def test_accuracy_tracker_needs_evidence() -> None:
    tracker = AccuracyTracker(half_life_steps=10.0)
    assert not tracker.is_accurate(min_top1=0.0, min_weight=1.0)
    tracker.record(0.9, True)
    assert tracker.is_accurate(min_top1=0.5, min_weight=1.0)
    assert not tracker.is_accurate(min_top1=0.5, min_weight=5.0)


def test_accuracy_tracker_forgets_with_half_life() -> None:
    tracker = AccuracyTracker(half_life_steps=10.0)
    tracker.seed(top1=1.0, logloss=0.1, weight=10.0)
    for _ in range(10):
        tracker.record(0.01, False)
    # Ten misses, one half-life: the seed counts about as much as the misses.
    assert 0.2 < tracker.top1 < 0.6
    for _ in range(100):
        tracker.record(0.01, False)
    assert tracker.top1 < 0.01
    assert tracker.logloss == pytest.approx(4.605, rel=0.01)
