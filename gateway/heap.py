"""The garbage collector's settings for a gateway that runs for days.

Start-up leaves about a million objects that live as long as the process (litellm,
tokenizers, torch, the config). Python's full collection walks every one of them: under
load each paused every request for 100-340 ms (the gateway-overhead load, tracing on).
`freeze_startup_heap` moves them out of the collector's sight (`gc.freeze`), so a full
collection walks only what came later (23-36 ms in the same load), and raises the young
generation's threshold so fewer short-lived request objects live long enough to be
promoted (none came in six rounds of 1,600 requests). Objects are still freed by reference
counting as before; only cycles among the frozen ones wait for `thaw_heap`.
"""
from __future__ import annotations

import gc
from dataclasses import dataclass

YOUNG_THRESHOLD = 10_000   # allocations between young collections (CPython's default: 700)


@dataclass(frozen=True, slots=True)
class HeapSettings:
    """What `freeze_startup_heap` changed, for `thaw_heap` to put back."""

    thresholds: tuple[int, int, int]


def freeze_startup_heap() -> HeapSettings:
    """Collect once, freeze every surviving object, raise the young threshold."""
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(max(YOUNG_THRESHOLD, before[0]), *before[1:])
    return HeapSettings(before)


def thaw_heap(settings: HeapSettings) -> None:
    """Undo `freeze_startup_heap` (an app stopping in a process that goes on: tests)."""
    gc.unfreeze()
    gc.set_threshold(*settings.thresholds)
