"""The garbage collector's settings for a gateway that runs for days.

Start-up leaves hundreds of thousands of objects that live as long as the process
(litellm, tokenizers, torch, the config: 443,000 with upstream models only). Python's full collection walks every one of them: under
load each paused every request for 100-340 ms (the gateway-overhead load, tracing on).
`freeze_startup_heap` moves them out of the collector's sight (`gc.freeze`), so a full
collection walks only what came later (23-36 ms in the same load), and raises the young
generation's threshold so fewer short-lived request objects live long enough to be
promoted (none came in six rounds of 1,600 requests). Objects are still freed by reference
counting as before; only cycles among the frozen ones wait for `thaw_heap`.
`[server] freeze_startup_heap = false` keeps CPython's defaults.

`GcPauses` counts the collections while the gateway serves, and how long they paused it
(every thread waits for a collection), for `/metrics` (admins), with the objects frozen.
`gc.get_freeze_count()` walks every frozen object (0.2-0.3 s on the event loop for the
210,000 of a gateway with local models), so it is read once, when `install` follows the
freeze, never at a scrape (the few frozen objects freed later are not taken off).
"""
from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field

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


@dataclass(slots=True)
class GenerationPauses:
    num_collections: int = 0
    total_s: float = 0.0
    max_s: float = 0.0


@dataclass(slots=True)
class GcPauses:
    """Collections by generation (0, 1, 2) and their pauses, from `install` to `remove`.
    The callback runs in whichever thread collects; it only adds to three numbers.

    Invariant: `num_frozen_objects` is the count `install` took (it follows each freeze of
    the start-up heap); `series` reads no more than these numbers."""

    generations: tuple[GenerationPauses, ...] = field(
        default_factory=lambda: tuple(GenerationPauses() for _ in range(3)))
    num_frozen_objects: int = 0
    _started_s: float | None = None

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_s = time.perf_counter()
            return
        if self._started_s is None:
            return
        pause_s = time.perf_counter() - self._started_s
        self._started_s = None
        counts = self.generations[min(info.get("generation", 2), 2)]
        counts.num_collections += 1
        counts.total_s += pause_s
        counts.max_s = max(counts.max_s, pause_s)

    def install(self) -> None:
        """Count collections from now on, and take the count of the objects frozen (the
        heap is frozen, if it is, just before: only a freeze adds to the count)."""
        self.num_frozen_objects = gc.get_freeze_count()   # O(frozen objects): once, not per scrape
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def remove(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def series(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """The counts as metric series, labelled by generation, and the objects frozen."""
        out: dict = {("stepahead_gc_frozen_objects", ()): float(self.num_frozen_objects)}
        for generation, counts in enumerate(self.generations):
            labels = (("generation", str(generation)),)
            out[("stepahead_gc_collections_total", labels)] = float(counts.num_collections)
            out[("stepahead_gc_pause_seconds_total", labels)] = counts.total_s
            out[("stepahead_gc_pause_max_seconds", labels)] = counts.max_s
        return out
